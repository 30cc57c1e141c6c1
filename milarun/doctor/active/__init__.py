"""`milarun doctor --active`: the probe children that measure each device, and their verdicts."""
