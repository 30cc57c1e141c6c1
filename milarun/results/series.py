"""A result's rate series: its ``timings`` entries of type "rate", per process or per rank,
and the steady rate each measured (results.steady)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from milarun.results import steady
from milarun.results.parts import is_mapping
from milarun.results.schema import MAX_RATE, is_finite

T = TypeVar("T")


def rank_timers(timings: Mapping[str, T], timer: str = "train") -> list[T]:
    """A distributed run's ``<timer>_<rank>`` entries in rank order (empty for a
    single-process run); the entries may be dicts read from a file or records in memory."""
    prefix = f"{timer}_"
    ranks = sorted(
        (int(key[len(prefix) :]), value)
        for key, value in timings.items()
        if key.startswith(prefix) and key[len(prefix) :].isdigit()
    )
    return [value for _, value in ranks]


def slice_width(record: Mapping[str, Any]) -> float:
    """A rate record's slice duration (0.5 s where it holds none that is usable)."""
    width = record.get("slice", 0.5)
    return float(width) if is_finite(width) and width > 0 else 0.5


def measured_rate(rates: Sequence[float], slice_duration: float) -> float | None:
    """The steady rate of a series; None when too short, or when NaN, zero, negative or
    absurd: such a rate is no measurement and the run counts as failed."""
    rate = steady.rate(rates, slice_duration)
    return rate if rate is not None and 0 < rate <= MAX_RATE else None


@dataclass(frozen=True)
class RateSeries:
    """A ``timings`` entry of type "rate": examples/s per slice of in-block time."""

    rates: tuple[float, ...]
    slice: float = 0.5
    slice_ends: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, record: Any) -> RateSeries | None:
        """The series of a timings entry; None for anything that is not one."""
        if not is_mapping(record):
            return None
        return cls(
            tuple(record.get("rates") or ()),
            slice_width(record),
            tuple(record.get("slice_ends") or ()),
        )

    @property
    def steady_slices(self) -> list[float]:
        """The slices of the steady window (results.steady)."""
        return steady.window(self.rates, self.slice)

    @property
    def steady_rate(self) -> float | None:
        """The steady rate (measured_rate)."""
        return measured_rate(self.rates, self.slice)
