"""How far a result's rate can be trusted and what it cost to reach: the steady window's
diagnostics (with the rule that decided the run's length and the CPU contention over the
window) and the start-up. The measurement (milarun.measure) writes them, the report reads
them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from milarun.results.records.base import KEY, OMIT_NONE, RECORD, FileRecord


@dataclass(frozen=True)
class RunLengthRecord(FileRecord):
    """``diagnostics.<timer>.extension``: what decided a run's length, the rule's settings
    and why it stopped."""

    min_slices: int | None = None
    ci_target: float | None = None
    deadline: float | None = None
    stopped_by: str | None = None  # "target", "deadline", or None when the rule never said stop
    # slices the run went on for because its full window drifted (a ramp), 0 when it did not
    drift_extension: int = 0


@dataclass(frozen=True)
class Contention(FileRecord):
    """``diagnostics.<timer>.contention`` (measure.contention): was the machine busy?"""

    others: float  # share (0-1) of our CPUs' time used by other processes (and steal)
    cpus: int | None  # how many CPUs this process could use
    load: float | None  # the 1-minute load average, highest sample in the window
    # seconds the share was measured over (a summary's worst run keeps none: not written)
    span: float | None = field(default=None, metadata={OMIT_NONE: True})


@dataclass(frozen=True)
class Diagnostics(FileRecord):
    """``diagnostics.<timer>`` (measure.diagnostics): how steady a rate series' steady
    window was (None where there is too little data)."""

    slices: int | None = None
    window_slices: int | None = None
    cv: float | None = None
    drift: float | None = None  # last third of the window over its first third, minus 1
    warmup: float | None = None  # seconds of in-block time before the steady band
    ci95: float | None = None
    flags: tuple[str, ...] = ()  # "few-slices", "drift", "throttle", "busy"
    extension: RunLengthRecord | None = field(default=None, metadata={RECORD: RunLengthRecord})
    # window slices the GPU ran throttled (measure.energy.Throttle's record; results.throttle
    # reads it, older records' shapes too)
    throttle: Mapping[str, Any] | None = None
    contention: Contention | None = field(default=None, metadata={RECORD: Contention})


@dataclass(frozen=True)
class StartupCost(FileRecord):
    """Where the time before the first slice went, in seconds (None where unknown): a
    result's (Startup) or a summary's mean over its runs."""

    imports: float | None = field(default=None, metadata={KEY: "import"})
    setup: float | None = None
    first_step: float | None = None
    to_first_slice: float | None = None


@dataclass(frozen=True)
class Startup(StartupCost):
    """``startup`` (measure.startup): time from launch to the first slice, in seconds (None
    where unknown).

    ``imports``: launch until the test's module was imported (interpreter, milarun, torch
    and the model's imports; a forked instance: the fork, and the warm process importing
    the test's module where it was the first to need it; "import" in the file); ``setup``:
    from calling the test to its first timed block (model and data set-up);
    ``first_step``: that first block; ``to_first_slice``: launch until the first 0.5 s slice
    closed; ``start``: "cold" or "forked"; ``start_note``: why, where it is not the usual
    (a cold start under a warm-starting supervisor, a fresh warm process).
    """

    start: str = "cold"
    start_note: str | None = None
