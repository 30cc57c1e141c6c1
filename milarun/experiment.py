"""The models' face of the harness: what a benchmark module (milabench/models/*.py) imports.

Kept at this path as a stable API while the implementation lives in milarun.measure.
"""

from milarun.machine.torchdevice import fp8_dtype, precision_unavailable
from milarun.measure.experiment import (
    BadTestArguments,
    DoesNotFit,
    EngineMissing,
    Experiment,
    ServerFailed,
    Timer,
)

__all__ = [
    "BadTestArguments",
    "DoesNotFit",
    "EngineMissing",
    "Experiment",
    "ServerFailed",
    "Timer",
    "fp8_dtype",
    "precision_unavailable",
]
