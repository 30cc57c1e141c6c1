"""Was the machine busy? The busy flag (milarun.measure.contention: other processes took a
quarter or more of a run's CPUs over its steady window) read over a summary, once, for the
report's warning, the tender's rule and the ranking of bids.

A busy run's rate says how fast the test went beside someone else's work, not how fast the
machine is: it is shown, never judged (docs/busy-and-acceptance.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from milarun.report.summary_entry import entries
from milarun.results.parts import as_map, number

MAX_NAMED = 3  # tests a warning names; past this it counts them


@dataclass(frozen=True)
class BusyTest:
    """One test's busy runs."""

    test: str
    runs: int  # its successful runs flagged busy
    of: int  # its successful runs
    others: float | None  # the share of its CPUs others took in its worst run
    load: float | None  # that run's 1-minute load average
    cpus: int | None  # the CPUs that run could use


@dataclass(frozen=True)
class Busy:
    """The busy tests of a summary, and what they are counted among."""

    tests: tuple[BusyTest, ...]
    of_tests: int  # tests with a successful run
    of_runs: int  # successful runs

    def __bool__(self) -> bool:
        return bool(self.tests)

    @property
    def runs(self) -> int:
        return sum(t.runs for t in self.tests)

    @property
    def worst(self) -> float | None:
        shares = [t.others for t in self.tests if t.others is not None]
        return max(shares) if shares else None

    @property
    def load(self) -> float | None:
        loads = [t.load for t in self.tests if t.load is not None]
        return max(loads) if loads else None


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def busy_of(summary: Mapping[str, Mapping[str, Any]]) -> Busy:
    """The busy flags of a summary's tests (report.summary: ``quality.flagged.busy`` and
    ``quality.busy``, the worst run's contention); a summary without them is not busy."""
    found, tests, runs = [], 0, 0
    for test, entry in sorted(entries(summary).items()):
        good = entry.n - entry.failures
        if good <= 0:
            continue
        tests, runs = tests + 1, runs + good
        quality = entry.measured
        flagged = _count(as_map(quality.flagged).get("busy"))
        if flagged:
            worst = quality.busy
            found.append(
                BusyTest(
                    test,
                    flagged,
                    good,
                    number(worst.others) if worst is not None else None,
                    number(worst.load) if worst is not None else None,
                    worst.cpus if worst is not None else None,
                )
            )
    return Busy(tuple(found), tests, runs)


def share(value: float | None) -> str:
    """A test's flag in the quality table: its worst run's share, e.g. ``62%``."""
    return "" if value is None else f"{value:.0%}"


def warning(busy: Busy) -> str | None:
    """The report's busy warning: one paragraph of a line or two, however many tests."""
    if not busy:
        return None
    if len(busy.tests) <= MAX_NAMED:
        where = ", ".join(f"{t.test} ({t.runs} of {t.of} run(s))" for t in busy.tests)
    else:
        where = f"{len(busy.tests)} of {busy.of_tests} tests ({busy.runs} of {busy.of_runs} runs)"
    took = f"up to {busy.worst:.0%} of" if busy.worst is not None else "part of"
    load = f", load up to {busy.load:.1f}" if busy.load is not None else ""
    whose = "its" if len(busy.tests) == 1 else "their"
    return (
        f"the machine was busy in {where}: other processes took {took} their CPUs{load} (per "
        f"test: the quality table's busy flag); {whose} rates are not verdict-grade"
    )


def mark(busy: Busy, tests: list[str] | None = None) -> str:
    """The mark beside a figure made of these tests' rates (the score, its ratio; None: all
    of them) when some were busy: ``busy: 23 of 24 tests, not verdict-grade``."""
    named = {t.test for t in busy.tests}
    among = [t for t in tests if t in named] if tests is not None else sorted(named)
    if not among:
        return ""
    total = len(tests) if tests is not None else busy.of_tests
    return f"busy: {len(among)} of {total} tests, not verdict-grade"
