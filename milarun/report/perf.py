"""A test's numbers as the report computes with them (ours or the baseline's): its runs,
failures, mean rate and spread, perf_adj, and the run sets its bootstraps resample."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from milarun.report import stats, tables


@dataclass
class Perf:
    """A test's numbers as the report uses them (ours or the baseline's)."""

    n: int
    fail: int
    perf: float
    std: float
    rates: list[float] | None

    @classmethod
    def of(cls, entry: dict[str, Any] | None) -> Perf:
        if not entry:
            return cls(0, 0, math.nan, math.nan, None)
        n, fail = int(entry.get("n") or 0), int(entry.get("failures") or 0)
        train = entry.get("train") or {}
        perf, std = tables.number(train.get("mean")), tables.number(train.get("std"))
        if not perf > 0:  # zero, negative or missing perf: every run counts as failed
            return cls(n, n, math.nan, math.nan, [])
        rates = entry.get("rates")
        return cls(
            n,
            fail,
            perf,
            std if math.isfinite(std) else 0.0,
            [float(r) for r in rates] if isinstance(rates, list) else None,
        )

    def adjusted(self, penalize_variance: bool) -> float:
        """perf_adj = (1 - fail/n) * (perf - penalty), penalty = min(std, perf)."""
        if self.n == 0 or not math.isfinite(self.perf):
            return math.nan
        penalty = min(self.std, self.perf) if penalize_variance else 0.0
        return (1 - self.fail / self.n) * (self.perf - penalty)

    def runs(self) -> stats.RunSet | None:
        return stats.RunSet(self.rates, self.fail) if self.rates is not None else None


def intervals(ours: dict[str, Perf]) -> dict[str, tuple[float, float] | None]:
    """Each test's 95% bootstrap interval of its mean rate."""
    return {t: stats.mean_interval(p.rates) if p.rates else None for t, p in ours.items()}


def scored(
    ours: dict[str, Perf], weighted: list[str], summary: dict[str, Any], pv: bool
) -> dict[str, float]:
    """The weighted tests with results that score: their perf_adj, when above 0."""
    adjusted = {t: ours[t].adjusted(pv) for t in weighted if t in summary}
    return {t: v for t, v in adjusted.items() if v > 0}


def run_sets(perfs: dict[str, Perf], tests: list[str]) -> dict[str, stats.RunSet] | None:
    """Each test's runs; None when a test keeps no per-run rates (a legacy summary)."""
    found = {}
    for test in tests:
        runs = perfs[test].runs()
        if runs is None:
            return None
        found[test] = runs
    return found
