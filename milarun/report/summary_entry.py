"""One test's entry of a summary (the baseline format, DESIGN section 5), declared once:
``report.summary`` writes it (to_dict) and the report's tables read it (from_dict, which
takes whatever a checked summary file holds: report.summary_file refused what the report
could not compute with). The blocks other modules own (energy, throttle, node_energy,
inference, natural) are kept as written and read there."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from milarun.results.records import Contention, FileRecord, StartupCost
from milarun.results.records.base import OMIT_NONE, RECORD, RECORDS

_OPTIONAL = {OMIT_NONE: True}  # a key the entry holds only where its runs say something


@dataclass(frozen=True)
class Stats(FileRecord):
    """{n, min, max, mean, std} of some runs' figures, the population std; null when none."""

    n: int = 0
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> Stats:
        if not values:
            return cls()
        mean = math.fsum(values) / len(values)
        var = math.fsum((v - mean) ** 2 for v in values) / len(values)
        return cls(len(values), min(values), max(values), mean, math.sqrt(var))


@dataclass(frozen=True)
class Quality(FileRecord):
    """How trustworthy the runs' rates are, their start-up and their efficiency, averaged
    over the successful runs (report.summary.quality)."""

    slices: float | None = None
    cv: float | None = None
    drift: float | None = None  # the worst run's
    warmup: float | None = None
    flagged: Mapping[str, Any] | None = None  # flag -> runs
    power_limit: float | None = None  # share of steady slices at the GPU's power limit
    sm_clock: float | None = None  # median SM clock (MHz)
    busy: Contention | None = field(default=None, metadata={RECORD: Contention})  # worst run
    startup: StartupCost | None = field(default=None, metadata={RECORD: StartupCost})
    flops_per_example: float | None = None
    achieved_flops: float | None = None
    percent_of_peak: float | None = None
    percent_of_measured_peak: float | None = None


NO_QUALITY = Quality()


@dataclass(frozen=True)
class SummaryEntry(FileRecord):
    """A test's runs summed up: counts, the rate stats (``train``: examples/s, the scored
    figure), each device's, the program time, and what the runs ran under."""

    n: int = 0  # runs, interrupted ones left out
    failures: int = 0
    total: Stats | None = field(default=None, metadata={RECORD: Stats})  # program seconds
    train: Stats | None = field(default=None, metadata={RECORD: Stats})
    pergpu: Mapping[str, Stats] | None = field(default=None, metadata={RECORDS: Stats})
    peak_memory: float | None = None  # MiB
    rates: tuple[float, ...] | None = None  # each successful run's (older summaries: none)
    failure_kinds: Mapping[str, Any] | None = None  # kind -> runs
    quality: Quality | None = field(default=None, metadata={RECORD: Quality})
    energy: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)
    throttle: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)
    node_energy: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)
    interrupted: int | None = field(default=None, metadata=_OPTIONAL)  # stopped by the operator
    dataset: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)
    tf32: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)
    nocache: bool | None = field(default=None, metadata=_OPTIONAL)
    throughput: Stats | None = field(default=None, metadata={RECORD: Stats, OMIT_NONE: True})
    nodes: int | None = field(default=None, metadata=_OPTIONAL)  # a distributed test's
    inference: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)
    natural: Mapping[str, Any] | None = field(default=None, metadata=_OPTIONAL)
    variant_of: str | None = field(default=None, metadata=_OPTIONAL)  # report.variants
    differs: str | None = field(default=None, metadata=_OPTIONAL)

    @property
    def mean_rate(self) -> float | None:
        return self.train.mean if self.train is not None else None

    @property
    def measured(self) -> Quality:
        """The quality block (all unknown where the summary has none)."""
        return self.quality or NO_QUALITY


def entries(summary: Mapping[str, Any]) -> dict[str, SummaryEntry]:
    """Every entry of a summary, typed (an entry that is no object reads as an empty one)."""
    return {
        test: SummaryEntry.from_dict(entry) or SummaryEntry() for test, entry in summary.items()
    }
