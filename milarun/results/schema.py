"""The result format's constants: its version, its failure kinds, the harness's flags and
the bounds no measurement passes (its keys and the type of each field are records.ResultRecord's,
checked by results.shape). DESIGN section 5 is its contract."""

from __future__ import annotations

import math
from typing import Any, TypeGuard

# The flags the harness adds to every test's parser (measure.experiment): how long a run
# measures, or its seed; not what it measures.
HARNESS_FLAGS = frozenset({"--min-slices", "--max-count", "--ci-target", "--seed"})

FAILURE_KINDS = (
    "exception",
    "nan",
    "timeout",
    "killed",
    "oom",
    "crash",
    "interrupted",
    "too-short",
    "no-rate",  # a steady rate of 0 (no example counted), or beyond any machine
    "server",  # the inference server a test started misbehaved (measure.loadgen)
    "unavailable",  # the engine a test needs is not installed (vLLM's own environment)
)

# The version of the file format a result is written in (results.upgrade reads every older
# one): 2 added this key; a file without it is version 1.
FORMAT_VERSION = 2
# The key only a record the harness wrote carries: its presence is the marker.
WRITTEN_BY = "written_by"
# ``written_by`` of the supervisor's record of an instance that wrote none: it holds the call
# the supervisor launched (a rerun repeats it)
HARNESS_WRITER = "harness"


# The record of `jobs --doctor` in a run folder (doctor-active[.<stamp>].json): not a result,
# so result readers pass over it rather than list it as skipped.
DOCTOR_RECORD = "doctor-active"

# A rate above this (examples/s) is not a measurement: beyond any machine, and its square
# (a variance) would overflow a float. Such a run counts as failed; a baseline is refused.
MAX_RATE = 1e15

# Weights above this are not weights but a way to overflow the score (1e308 -> nan).
MAX_WEIGHT = 1e6


def is_number(value: Any) -> bool:
    kind = type(value)  # a parsed float or int first: reports test millions
    return kind is float or kind is int or (isinstance(value, (int, float)) and kind is not bool)


def is_finite(value: Any) -> TypeGuard[float]:
    """A number (not a bool) that is neither NaN nor infinite."""
    return is_number(value) and math.isfinite(value)


def positive(value: Any) -> float | None:
    """A finite number above 0 (not a bool) as a float, else None: a power, a rate, a size."""
    return float(value) if is_finite(value) and value > 0 else None
