"""Trends and verdicts: each point of a test's history judged against its own past and its
siblings.

A series is one test on one machine (``by="test"``), on one node (``"node"``) or on one GPU
by UUID, wherever it ran (``"gpu"``; a CPU slice is ``node/device``). A point is one round of
one run (a run with ``--repeat 2`` makes two points), its rate the mean of its instances'
steady rates with a 95% interval, its sample the steady slices of those instances.

Each point is judged by Welch's test on steady slices against its baseline window (the
pooled slices of the last ``window`` accepted points of the same series with the same
setup, see results' like with like), and a relative threshold:

- Insufficient data: fewer than ``MIN_BASELINE`` earlier points to compare with.
- Regression: significantly slower by at least the threshold, and so was the point before:
  two consecutive points, so that one noisy run is not an alert.
- Suspicious: the first such slower point (one more makes it a Regression); a point whose
  instances all failed; or (node and GPU series) a point significantly slower, by the
  threshold, than its siblings of the same run and round.
- Improvement: significantly faster by at least the threshold.
- No change: otherwise.
- Busy: other processes took a quarter or more of an instance's CPUs (its ``busy`` flag,
  measure.contention): shown with its change, never judged (docs/busy-and-acceptance.md); no
  alert, in no baseline, and neither starts nor breaks the two slower points of a Regression.

Slower points never join a later point's baseline (a regression does not become the norm).
Each point carries what changed beside it: the driver, its steady windows' throttling and
flags (a busy machine, drift), its failures.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from milarun.errors import UsageError
from milarun.history.models import Run
from milarun.history.points import (
    INSUFFICIENT,
    Filters,
    Instance,
    Point,
    Sample,
    build_points,
    check_names,
    instances,
)
from milarun.report import stats
from milarun.results import throttle

__all__ = ["Filters", "Instance", "Options", "Point", "Sample", "alerts", "build_points", "history"]
REGRESSION = "Regression"
IMPROVEMENT = "Improvement"
SUSPICIOUS = "Suspicious"
NO_CHANGE = "No change"
BUSY = "Busy"
VERDICTS = (REGRESSION, SUSPICIOUS, IMPROVEMENT, NO_CHANGE, INSUFFICIENT, BUSY)
LEVELS = ("test", "node", "gpu")
THRESHOLD = 0.05  # a change smaller than this is no change, however significant
WINDOW = 5  # points in the baseline window
MIN_BASELINE = 2  # points a baseline needs
ALERT_FLAGS = ("busy", "drift", "throttle")  # the diagnostics flags an alert repeats


@dataclass(frozen=True)
class Options:
    by: str = "test"
    threshold: float = THRESHOLD
    window: int = WINDOW

    def __post_init__(self) -> None:
        if self.by not in LEVELS:
            raise UsageError(f"--by {self.by}: use one of {', '.join(LEVELS)}")
        if not 0 < self.threshold < 1:
            raise UsageError(f"--threshold {self.threshold}: give a fraction such as 0.05")
        if not 1 <= self.window <= 1000:
            raise UsageError(f"--window {self.window}: give a number of points, 1 to 1000")


def _welch(sample: Sample, base: Sample, threshold: float) -> tuple[str, float | None, float]:
    """(faster/slower/no significant change, p, change) of a sample against a baseline. A
    change under the threshold is no change whatever its p: the test is not run (p None)."""
    change = sample.mean / base.mean - 1
    if abs(change) < threshold:
        return "no significant change", None, change
    verdict = stats.welch_verdict(sample.mean, sample.std, sample.n, base.mean, base.std, base.n)
    return verdict.label, verdict.p_value, change


def _notes(point: Point, before: Point | None) -> list[str]:
    notes = []
    if before is not None and before.drivers and point.drivers != before.drivers:
        old, new = ", ".join(sorted(before.drivers)), ", ".join(sorted(point.drivers))
        notes.append(f"driver {old} -> {new}")
    if point.failures:
        kinds = sorted({i.failure_kind or "?" for i in point.instances if i.rate is None})
        notes.append(f"{point.failures} of {len(point.instances)} failed ({', '.join(kinds)})")
    flags = sorted({f for i in point.instances for f in i.flags or () if f in ALERT_FLAGS})
    if point.busy:
        flags.remove("busy")
        notes.append(f"machine busy in {point.busy} of {len(point.rates)} instance(s): not judged")
    if flags:
        notes.append("steady window: " + ", ".join(flags))
    # a fault (thermal, hardware, power brake): a run at its power limit is not throttled
    found = [throttle.read(i.throttle) for i in point.instances]
    throttled = [t for t in found if t is not None and t.fault_slices]
    if throttled:
        notes.append(f"throttled in {len(throttled)} instance(s)")
    return notes


def _against(point: Point, base: list[Point], options: Options) -> str | None:
    """Welch's label against the baseline (the point's p and change set), None without one."""
    if len(base) < MIN_BASELINE or point.sample.n < 2:
        return None
    pooled = sum((p.sample for p in base), Sample())
    label, point.p_value, point.change = _welch(point.sample, pooled, options.threshold)
    return label


def judge(series: list[Point], options: Options) -> None:
    """Give each point of one series its verdict, in time order."""
    accepted: list[Point] = []
    previous: Point | None = None
    slow_before = False
    for point in series:
        point.notes = _notes(point, previous)
        if previous is not None and point.args_hash != previous.args_hash:
            point.notes.append("other arguments or data than the point before")
        base = [p for p in accepted if p.args_hash == point.args_hash][-options.window :]
        point.baseline_points = len(base)
        if point.rate is not None and point.busy:  # its change shown, never judged
            _against(point, base, options)
            point.verdict, previous = BUSY, point
            continue
        slow = False
        label = _against(point, base, options) if point.rate is not None else None
        if point.rate is None:
            point.verdict = SUSPICIOUS if point.instances else INSUFFICIENT
        elif label is None:
            point.verdict = INSUFFICIENT
        else:
            change = point.change or 0.0
            slow = label == "slower" and change <= -options.threshold
            if slow:
                point.verdict = REGRESSION if slow_before else SUSPICIOUS
                if slow_before and previous is not None:  # what changed when it began
                    point.notes += [f"since {n}" for n in previous.notes if n.startswith("driver")]
                if not slow_before:
                    point.notes.append(
                        "slower than its history: one more such point is a Regression"
                    )
            elif label == "faster" and change >= options.threshold:
                point.verdict = IMPROVEMENT
            else:
                point.verdict = NO_CHANGE
        if not slow and point.rate is not None:
            accepted.append(point)
        slow_before, previous = slow, point


def judge_siblings(series: dict[str, list[Point]], options: Options) -> None:
    """Node and GPU series: a point slower than the other nodes/GPUs of its run and round,
    significantly and by the threshold, is Suspicious (unless already a Regression)."""
    rounds: dict[tuple[str, int, int, str], list[Point]] = defaultdict(list)
    for points in series.values():
        for p in points:
            rounds[(p.test, p.run_id, p.repeat, p.args_hash)].append(p)
    for siblings in rounds.values():
        measured = [p for p in siblings if p.rate is not None and p.sample.n >= 2 and not p.busy]
        if len(measured) < 2:
            continue
        everyone = sum((p.sample for p in measured), Sample())
        for point in measured:
            label, p_value, change = _welch(
                point.sample, everyone - point.sample, options.threshold
            )
            if label == "slower" and change <= -options.threshold:
                shown = "-" if p_value is None else f"{p_value:.2g}"
                point.notes.append(
                    f"{-change:.1%} slower than its {len(measured) - 1} sibling(s) (p={shown})"
                )
                if point.verdict in (NO_CHANGE, INSUFFICIENT, IMPROVEMENT):
                    point.verdict = SUSPICIOUS


LOOKBACK = 4  # with --since, runs read before it per machine: this many baseline windows


def _cutoff(session: Session, filters: Filters, options: Options) -> float | None:
    """With ``since``: the start of the oldest run a point after it may compare with (per
    machine, LOOKBACK windows of runs before it), so that a query of the last weeks does
    not read the whole year."""
    if filters.since is None:
        return None
    keep = LOOKBACK * options.window + 2
    starts: dict[int, list[float]] = defaultdict(list)
    rows = session.execute(
        select(Run.machine_id, Run.started_at)
        .where(Run.started_at < filters.since)
        .order_by(Run.started_at.desc())
    )
    for machine, started in rows:
        if len(starts[machine]) < keep:
            starts[machine].append(started)
    return min((found[-1] for found in starts.values()), default=filters.since)


def history(session: Session, filters: Filters, options: Options) -> dict[str, list[Point]]:
    """Every series the filters select, each point judged; points before ``since`` (judged
    as the baseline of later ones) are left out."""
    series = build_points(
        instances(session, filters, _cutoff(session, filters, options)), options.by
    )
    if not series:  # a name that matches nothing says so, with the names it may have meant
        check_names(session, filters)
    for points in series.values():
        judge(points, options)
    if options.by != "test":
        judge_siblings(series, options)
    if filters.since is not None:
        since = filters.since
        series = {k: [p for p in v if p.when >= since] for k, v in series.items()}
        series = {k: v for k, v in series.items() if v}
    return series


def alerts(series: dict[str, list[Point]], verdicts: Sequence[str]) -> list[Point]:
    """The points whose verdict is one of ``verdicts``, most recent first."""
    found = [p for points in series.values() for p in points if p.verdict in verdicts]
    return sorted(found, key=lambda p: (-p.when, p.series))
