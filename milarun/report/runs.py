"""What a report says of the runs themselves, from the result files: the failed runs with
the end of their log, the isolation each instance got, the system records, and each test's
rate series for the charts. Every renderer (text, JSON, CSV, HTML) shows these values."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from milarun.machine import isolation
from milarun.report.summary import Loaded
from milarun.results import read

ERROR_TAIL_LINES = 30  # the end of a failed run's log kept in the report


@dataclass(frozen=True)
class FailedRun:
    """A run that gave no rate: why, and the end of what it printed."""

    test: str
    job_id: str
    device: str
    kind: str
    message: str
    file: str
    tail: str


@dataclass(frozen=True)
class IsolationRow:
    """One distinct isolation setting (device, CPUs, memory limit, cgroups, threads) and
    how many runs had it."""

    device: str
    cpus: str
    memory_limit: str
    cpuset: str
    memory: str
    threads: str
    runs: int


@dataclass(frozen=True)
class Series:
    """One run's examples/s per slice (a distributed run's ranks added up)."""

    device: str
    slice: float
    rates: tuple[float, ...]


@dataclass(frozen=True)
class RunsSection:
    failed: tuple[FailedRun, ...] = ()
    isolation: tuple[IsolationRow, ...] = ()
    systems: tuple[dict[str, str], ...] = ()
    # test -> its runs' series, in file order
    series: dict[str, tuple[Series, ...]] = field(default_factory=dict)


def failed_runs(loaded: Loaded, many_nodes: bool) -> list[FailedRun]:
    rows = []
    for result, path in zip(loaded.results, loaded.paths):
        view = read.ResultView.from_dict(result)
        if view.rate() is not None:
            continue
        failure = result.get("failure")
        failure = failure if isinstance(failure, Mapping) else {}
        error = str(result.get("error") or failure.get("message") or "")
        rows.append(
            FailedRun(
                view.name,
                str(result.get("job_id")),
                view.device_label(many_nodes),
                view.failure_kind,
                str(failure.get("message") or ""),
                path.name,
                "\n".join(error.splitlines()[-ERROR_TAIL_LINES:]),
            )
        )
    return rows


def _cpus(cpus: Any) -> str:
    """0,1,2,3,8 -> 0-3,8; "-" when the result does not say."""
    if not isinstance(cpus, list):
        return "-"
    return isolation.cpu_list(sorted({c for c in cpus if isinstance(c, int)})) or "-"


def isolation_rows(results: Iterable[Mapping[str, Any]], many_nodes: bool) -> list[IsolationRow]:
    """The isolation each instance got, one row per distinct setting with its run count."""
    counts: Counter[tuple[str, ...]] = Counter()
    for result in results:
        iso = result.get("isolation")
        iso = iso if isinstance(iso, Mapping) else {}
        groups = iso.get("cgroups")
        groups = groups if isinstance(groups, Mapping) else {}
        limit = iso.get("memory_limit")
        counts[
            (
                read.ResultView.from_dict(result).device_label(many_nodes),
                _cpus(iso.get("cpus")),
                f"{limit / 2**30:.1f} GiB" if isinstance(limit, (int, float)) else "none",
                str(groups.get("cpuset", "-")),
                str(groups.get("memory", "-")),
                str(iso.get("torch_threads", "-")),
            )
        ] += 1
    return [
        IsolationRow(device, cpus, limit, cpuset, memory, threads, n)
        for (device, cpus, limit, cpuset, memory, threads), n in sorted(counts.items())
    ]


def systems(results: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Each distinct system record, flattened to key -> text."""
    seen: dict[str, dict[str, str]] = {}
    for result in results:
        record = result.get("system")
        record = record if isinstance(record, Mapping) else {}
        key = json.dumps(record, sort_keys=True, default=str)
        if key not in seen:
            seen[key] = {
                k: (json.dumps(v) if isinstance(v, (dict, list)) else str(v))
                for k, v in record.items()
            }
    return list(seen.values())


def run_series(view: read.ResultView, many_nodes: bool) -> Series | None:
    """A run's rate per slice, its ranks added up slice by slice (None: no series)."""
    found = view.all_series()
    if not found or not all(s.rates for s in found):
        return None
    length = min(len(s.rates) for s in found)
    total = tuple(sum((s.rates[i] or 0.0) for s in found) for i in range(length))
    return Series(view.device_label(many_nodes), found[0].slice, total)


def test_series(
    results: Iterable[Mapping[str, Any]], many_nodes: bool
) -> dict[str, tuple[Series, ...]]:
    by_test: dict[str, list[Series]] = defaultdict(list)
    for result in results:
        view = read.ResultView.from_dict(result)
        series = run_series(view, many_nodes)
        if series is not None:
            by_test[view.name].append(series)
    return {test: tuple(by_test[test]) for test in sorted(by_test)}


def runs_section(loaded: Loaded | None) -> RunsSection:
    """The runs part of a report (empty for a summary file: it keeps no run)."""
    if loaded is None:
        return RunsSection()
    many_nodes = read.spans_nodes(loaded.results)
    return RunsSection(
        tuple(failed_runs(loaded, many_nodes)),
        tuple(isolation_rows(loaded.results, many_nodes)),
        tuple(systems(loaded.results)),
        test_series(loaded.results, many_nodes),
    )
