"""The models' face of the calibration clock spin (implementation: milarun.measure.spin)."""

from milarun.measure.spin import spin

__all__ = ["spin"]
