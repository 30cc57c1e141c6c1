"""The steady window: which rate slices make a run's rate (DESIGN section 5).

A run's rate is the mean of the slices from 10 s before the end to 1 s before the end of
its rate series (``rates[-20:-2]`` with 0.5 s slices); fewer than 3 usable slices is no
rate. Every reader and writer of a rate takes the window from here. The energy and
throttle records need the same window in wall-clock time (``wall_clock_window``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FROM_END = 10.0  # seconds before the end where the window starts
TO_END = 1.0  # seconds before the end where it stops
MIN_SLICES = 3


def slices(count: int, slice_duration: float = 0.5) -> range:
    """The indices of the steady window among ``count`` slices (``range(count)[-20:-2]``)."""
    start = round(FROM_END / slice_duration)
    stop = round(TO_END / slice_duration)
    return range(max(0, count - start), count - stop) if count > stop else range(0)


def window(rates: Sequence[float], slice_duration: float = 0.5) -> list[float]:
    """The slices from 10 s before the end to 1 s before the end (``rates[-20:-2]``)."""
    index = slices(len(rates), slice_duration)
    return list(rates[index.start : index.stop])


def rate(rates: Sequence[float], slice_duration: float = 0.5) -> float | None:
    """Mean examples/s over the steady window; None with fewer than 3 usable slices."""
    usable = [r for r in window(rates, slice_duration) if r is not None]
    if len(usable) < MIN_SLICES:
        return None
    return sum(usable) / len(usable)


def span(count: int, slice_duration: float) -> tuple[float, float]:
    """The in-block time [start, stop) the window covers among ``count`` slices, from the
    first slice; empty (start == stop) when there is no window."""
    index = slices(count, slice_duration)
    start = index.start * slice_duration
    return start, max(start, index.stop * slice_duration)


@dataclass(frozen=True)
class WallClockWindow:
    """The steady window in wall-clock time: its slices' spans and the examples in it."""

    spans: list[tuple[float, float]]
    examples: float

    @property
    def start(self) -> float:
        return self.spans[0][0]

    @property
    def end(self) -> float:
        return self.spans[-1][1]


def wall_clock_window(record: Any) -> WallClockWindow | None:
    """The steady window of a rate record (records.RateRecord) in wall-clock time, for the
    GPU monitor's samples; None when it has no window or no slice times."""
    ends, rates, width = record.slice_ends, record.rates, record.slice
    if len(ends) != len(rates):
        return None
    index = slices(len(rates), width)
    if len(index) < MIN_SLICES:
        return None
    # A slice starts where the one before it closed; the first one a slice before its end
    # (exact when it lies within one block, as it does for steps longer than a slice).
    spans = [(ends[i - 1] if i else ends[0] - width, ends[i]) for i in index]
    return WallClockWindow(spans, math.fsum(rates[i] for i in index) * width)
