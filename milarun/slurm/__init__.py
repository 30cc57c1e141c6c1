"""Fleet and multi-node runs through Slurm (sbatch/srun) and torchrun."""
