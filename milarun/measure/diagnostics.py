"""Steady-state diagnostics of a rate series, and the rule that decides a run's length.

A run's rate is the mean of its steady window (steady.window). These numbers say
whether that window was really steady: its coefficient of variation, its drift (the last
third against the first third), how long the warm-up took, and whether there were enough
slices. The report flags drift beyond 2% and windows with too few slices.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from milarun.results import steady
from milarun.results.records import Diagnostics, RunLengthRecord

DRIFT_LIMIT = 0.02
# A steady window shorter than 5 s (10 slices of 0.5 s; the full one is 9 s) is flagged:
# its mean rests on too little time to trust a 1% difference.
FEW_SLICES_SECONDS = 5.0
BAND_MIN = 0.02  # the steady band is at least +/- 2% around the steady rate
DEADLINE_ENV = "MILARUN_DEADLINE"  # epoch seconds: the adaptive extension stops before it
DEFAULT_EXTENSION_LIMIT = 600.0  # seconds of extension when no deadline is known
DRIFT_EXTENSION_LIMIT = 60.0  # seconds a drifting window may extend a run (within its deadline)
# Two-sided 95% Student t quantiles for n - 1 = 1..29 degrees of freedom (then ~normal).
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _std(values: Sequence[float]) -> float:
    mean = _mean(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def ci_halfwidth(window: Sequence[float]) -> float | None:
    """95% confidence half-width of the window's mean, relative to the mean."""
    n = len(window)
    if n < 2:
        return None
    mean = _mean(window)
    if mean <= 0:
        return None
    sample_std = _std(window) * math.sqrt(n / (n - 1))
    t = _T95[n - 2] if n - 2 < len(_T95) else 1.96
    return t * sample_std / math.sqrt(n) / mean


def _warmup(rates: Sequence[float], mean: float, cv: float, slice_duration: float) -> float | None:
    """Time until a slice first lands in the steady band (the band is wide enough for the
    window's own noise, so a noisy but flat series has no warm-up)."""
    band = max(BAND_MIN, 2 * cv)
    for index, rate in enumerate(rates):
        if rate is not None and abs(rate / mean - 1) <= band:
            return index * slice_duration
    return None


def steady_state(rates: Sequence[float], slice_duration: float = 0.5) -> Diagnostics:
    """Diagnostics of one rate series (None where there is not enough data)."""
    window = [r for r in steady.window(list(rates), slice_duration) if r is not None]
    few = len(window) < round(FEW_SLICES_SECONDS / slice_duration)
    short = Diagnostics(
        slices=len(rates),
        window_slices=len(window),
        ci95=ci_halfwidth(window),
        flags=("few-slices",) if few else (),
    )
    if len(window) < steady.MIN_SLICES or _mean(window) <= 0:
        return short
    mean = _mean(window)
    cv = _std(window) / mean
    third = len(window) // 3
    drift = _mean(window[-third:]) / _mean(window[:third]) - 1
    # Drift is judged on a full window only: on a few seconds, thirds of 3 slices differ by
    # more than 2% from noise alone (quick runs flagged 13 of 19 tests every run).
    full = len(steady.slices(10**6, slice_duration))
    if len(window) < full:
        judged: tuple[str, ...] = ("short-window",)
    else:
        judged = ("drift",) if abs(drift) > DRIFT_LIMIT else ()
    flags = short.flags + judged
    return replace(
        short, cv=cv, drift=drift, warmup=_warmup(rates, mean, cv, slice_duration), flags=flags
    )


# A run measures at least one full steady window (rates[-20:-2]: 18 slices), the two
# slices after it, and two before it, whatever --max-count says.
DEFAULT_MIN_SLICES = 22


@dataclass
class RunLength:
    """When a run has measured enough, once its --max-count examples (if any) are done.

    ``min_slices``: at least this many slices in all; ``ci_target``: the relative 95% CI
    half-width of the steady window's mean to reach. Bounded by the job's deadline (the
    harness passes it in MILARUN_DEADLINE) or DEFAULT_EXTENSION_LIMIT seconds after the
    first question. The deadline never cuts --max-count short: the harness's max_duration
    does, as a timeout.
    """

    min_slices: int | None = DEFAULT_MIN_SLICES
    ci_target: float | None = None
    deadline: float | None = None
    reached_at: float | None = None
    stopped_by: str | None = None
    drifted_at: int | None = None  # slices measured when a full window first drifted
    drift_extension: int = 0
    _judged_at: int = -1
    _drifted: bool = False

    @classmethod
    def from_args(cls, min_slices: int | None, ci_target: float | None) -> RunLength:
        deadline = os.environ.get(DEADLINE_ENV)
        return cls(
            DEFAULT_MIN_SLICES if min_slices is None else min_slices,
            ci_target,
            float(deadline) if deadline else None,
        )

    def satisfied(self, rates: Sequence[float], slice_duration: float) -> bool:
        """True when the run may stop (asked once --max-count is reached)."""
        now = time.time()
        if self.reached_at is None:
            self.reached_at = now
        limit = (
            self.deadline
            if self.deadline is not None
            else (self.reached_at + DEFAULT_EXTENSION_LIMIT)
        )
        if now >= limit:
            self.stopped_by = "deadline"
            return True
        if self.min_slices is not None and len(rates) < self.min_slices:
            return False
        if self.ci_target is not None:
            window = steady.window(list(rates), slice_duration)
            width = ci_halfwidth(window)
            if width is None or width > self.ci_target:
                return False
        if self._drifting(rates, slice_duration):
            return False
        self.stopped_by = "target"
        return True

    def _drifting(self, rates: Sequence[float], slice_duration: float) -> bool:
        """A full window that drifts beyond DRIFT_LIMIT holds a ramp (clocks settling, a
        cache warming): the run goes on, its window moving past the ramp, for up to
        DRIFT_EXTENSION_LIMIT seconds; the record says how many slices it added."""
        if len(rates) == self._judged_at:  # asked after every block: judged once a slice
            return self._drifted
        self._judged_at = len(rates)
        self._drifted = self._judge_drift(rates, slice_duration)
        return self._drifted

    def _judge_drift(self, rates: Sequence[float], slice_duration: float) -> bool:
        found = steady_state(list(rates), slice_duration)
        if found.drift is None or "drift" not in found.flags:
            if self.drifted_at is not None:
                self.drift_extension = len(rates) - self.drifted_at
            return False
        if self.drifted_at is None:
            self.drifted_at = len(rates)
        self.drift_extension = len(rates) - self.drifted_at
        return self.drift_extension * slice_duration < DRIFT_EXTENSION_LIMIT

    def record(self) -> RunLengthRecord:
        return RunLengthRecord(
            self.min_slices, self.ci_target, self.deadline, self.stopped_by, self.drift_extension
        )


def log_record(log: Any) -> Diagnostics:
    """The diagnostics of one RateLog, with the rule that decided its length."""
    rule = log.length_rule
    return replace(
        steady_state(log.rates, log.slice_duration),
        extension=rule.record() if rule is not None else None,
    )
