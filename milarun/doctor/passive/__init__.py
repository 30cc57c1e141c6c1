"""`milarun doctor`'s checks that measure nothing themselves: NVML, torch, cgroups, data, DCGM."""
