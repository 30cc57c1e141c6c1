"""A test's numbers as the report computes with them (ours or the baseline's): its runs,
failures, mean rate and spread, perf_adj, and the run sets its bootstraps resample."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator, Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from milarun.report import stats, tables
from milarun.report.summary_entry import Stats, SummaryEntry


@dataclass
class Perf:
    """A test's numbers as the report uses them (ours or the baseline's)."""

    n: int
    fail: int
    perf: float
    std: float
    rates: list[float] | None

    @classmethod
    def of(cls, entry: Mapping[str, Any] | None) -> Perf:
        if not entry:
            return cls(0, 0, math.nan, math.nan, None)
        typed = SummaryEntry.from_dict(entry) or SummaryEntry()
        n, fail, train = typed.n, typed.failures, typed.train or Stats()
        perf, std = tables.finite_or_nan(train.mean), tables.finite_or_nan(train.std)
        if not perf > 0:  # zero, negative or missing perf: every run counts as failed
            return cls(n, n, math.nan, math.nan, [])
        rates = typed.rates
        return cls(
            n,
            fail,
            perf,
            std if math.isfinite(std) else 0.0,
            [float(r) for r in rates] if rates is not None else None,
        )

    def adjusted(self, penalize_variance: bool) -> float:
        """perf_adj = (1 - fail/n) * (perf - penalty), penalty = min(std, perf)."""
        if self.n == 0 or not math.isfinite(self.perf):
            return math.nan
        penalty = min(self.std, self.perf) if penalize_variance else 0.0
        return (1 - self.fail / self.n) * (self.perf - penalty)

    def runs(self) -> stats.RunSet | None:
        return stats.RunSet(self.rates, self.fail) if self.rates is not None else None


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


Interval = tuple[float, float] | None
SWITCH = 0.0002  # seconds: sys.setswitchinterval while the bootstrap threads run


@contextlib.contextmanager
def bootstrap_threads() -> Iterator[Executor]:
    """Two threads for the bootstraps (numpy, which releases the GIL: 5 s of a fleet run's
    100,000 runs) while the report is read from the results on the main one. Each numpy
    step of a bootstrap waits for the GIL the main thread holds: handed on every 0.2 ms
    rather than 5 meanwhile, a fleet report's threads waited seconds less."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH)
    pool = ThreadPoolExecutor(2)
    try:
        yield pool
    except BaseException:
        pool.shutdown(cancel_futures=True)  # a bad input's error says so at once
        raise
    finally:
        pool.shutdown()
        sys.setswitchinterval(switch)


class EarlyIntervals:
    """Each test's 95% bootstrap interval of its mean rate, started on the bootstrap
    threads as the summary makes the test's entry (``start``), so that they run while the
    other tests are summarised; the report takes those of the same entries."""

    def __init__(self, pool: Executor) -> None:
        self._pool = pool
        self._started: dict[str, tuple[Any, Future[Interval]]] = {}

    def start(self, test: str, entry: Mapping[str, Any]) -> None:
        rates = Perf.of(entry).rates
        if rates and len(rates) >= 2:  # below, no interval (stats.mean_interval)
            future = self._pool.submit(stats.mean_interval, rates)
            self._started[test] = (entry.get("rates"), future)

    def of(self, test: str, entry: Mapping[str, Any] | None) -> Future[Interval] | None:
        """The interval started for this very entry (its rates the same list), else None."""
        started = self._started.get(test)
        if started is None or entry is None or started[0] is not entry.get("rates"):
            return None
        return started[1]


def intervals(
    ours: dict[str, Perf],
    summary: Mapping[str, Any],
    pool: Executor,
    early: EarlyIntervals | None = None,
) -> dict[str, Future[Interval] | None]:
    """Each test's 95% bootstrap interval of its mean rate (None: fewer than 2 runs), those
    ``early`` started taken as they are, the others started on ``pool``."""
    found: dict[str, Future[Interval] | None] = {}
    for test, mine in ours.items():
        started = early.of(test, summary.get(test)) if early is not None and mine.rates else None
        found[test] = started or (
            pool.submit(stats.mean_interval, mine.rates) if mine.rates else None
        )
    return found
