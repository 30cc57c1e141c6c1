"""``report --db URL --machines A B C``: machines side by side, from the database.

Each pick is a machine's name (its latest run) or ``run:ID`` (that run). Each run is turned
into the summary format (per test: runs, failures, steady-rate statistics and rates), and
the usual report math (milarun.report.build) scores it with its bootstrap interval; every
machine after the first is compared with the first: ratios, the score ratio with its
interval, and like with like (the same test function, arguments and data, by each result's
setup hash) per test. Formatting is render's; this module computes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from milarun.errors import UsageError, close_names
from milarun.history.models import Machine, Result, Run
from milarun.report import build, summary
from milarun.report.weights import default_weights, load_weights

MAX_MACHINES = 12


@dataclass(frozen=True)
class Column:
    label: str  # machine (run id)
    report: build.Report  # against the first column (none for the first)
    setups: dict[str, set[str]]  # test -> its results' setup hashes


@dataclass(frozen=True)
class SideBySide:
    columns: list[Column]
    tests: list[str]
    unlike: dict[str, list[str]]  # test -> the labels not measured like the first


def _run_of(session: Session, pick: str) -> tuple[str, int]:
    if pick.startswith("run:"):
        found = session.execute(
            select(Machine.name, Run.id).join(Machine).where(Run.id == _run_id(pick))
        ).first()
        if found is None:
            raise UsageError(f"--machines {pick}: no such run in the database")
        return f"{found[0]} (run {found[1]})", found[1]
    run_id = session.scalar(select(func.max(Run.id)).join(Machine).where(Machine.name == pick))
    if run_id is None:
        names = sorted(session.scalars(select(Machine.name)).all())
        raise UsageError(
            f"--machines {pick[:80]!r}: no such machine in the database"
            f"{close_names(pick, names)} (machines: {', '.join(names[:20]) or 'none'}; "
            "or give run:ID)"
        )
    return f"{pick} (run {run_id})", run_id


def _run_id(pick: str) -> int:
    try:
        return int(pick[4:])
    except ValueError:
        raise UsageError(f"--machines {pick[:80]!r}: give run:<number>") from None


def run_summary(session: Session, run_id: int) -> tuple[dict[str, Any], dict[str, set[str]]]:
    """A run's summary (the baseline format's n, failures, train, rates) and setups."""
    rates: dict[str, list[float]] = {}
    failures: dict[str, int] = {}
    setups: dict[str, set[str]] = {}
    rows = session.execute(
        select(Result.test, Result.rate, Result.args_hash).where(Result.run_id == run_id)
    )
    for test, rate, setup in rows:
        rates.setdefault(test, [])
        failures.setdefault(test, 0)
        setups.setdefault(test, set()).add(setup)
        if rate is not None and math.isfinite(rate):
            rates[test].append(rate)
        else:
            failures[test] += 1
    found = {
        test: {
            "n": len(values) + failures[test],
            "failures": failures[test],
            "train": summary.stats(values),
            "rates": values,
        }
        for test, values in rates.items()
    }
    return found, setups


def side_by_side(session: Session, picks: list[str], weights: str | None) -> SideBySide:
    if not 1 <= len(picks) <= MAX_MACHINES:
        raise UsageError(f"--machines: give 1 to {MAX_MACHINES} machines (or run:ID)")
    runs = [_run_of(session, pick) for pick in picks]
    summaries = [run_summary(session, run_id) for _, run_id in runs]
    tests = sorted({t for found, _ in summaries for t in found})
    chosen = load_weights(weights) if weights else default_weights(tests)
    first_label, (first, first_setups) = runs[0][0], summaries[0]
    columns: list[Column] = []
    for (label, _), (found, setups) in zip(runs, summaries):
        compare = (first_label, first) if columns else None
        report = build.build_report(found, title=label, weights=chosen, compare=compare)
        columns.append(Column(label, report, setups))
    unlike = {
        test: [
            c.label
            for c in columns[1:]
            if test in c.setups and test in first_setups and c.setups[test] != first_setups[test]
        ]
        for test in tests
    }
    return SideBySide(columns, tests, {t: v for t, v in unlike.items() if v})
