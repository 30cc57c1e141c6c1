"""This machine: devices, GPU ids and probes, student cgroups, the system record, the Slurm
environment and the supervisor watchdog."""
