"""What a report says of the runs themselves, from the result files: the failed runs with
the end of their log, the isolation each instance got, the system records, and each test's
rate series for the charts (with their steady windows). Every renderer (text, JSON, CSV,
HTML) shows these values."""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from milarun.machine import isolation
from milarun.report.about import About, about, natural_key, systems
from milarun.results import parts, read, steady
from milarun.results.folder import Loaded

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
    """The isolation one instance (a device's student slot) got over its runs: its CPUs,
    memory limit, cgroups and torch threads, and how many runs it had. A setting its runs
    did not all share reads "most common; other (the tests that had it)": torch threads
    differ where a test sets its own (cart uses 1, as the legacy suite did)."""

    device: str
    cpus: str
    memory_limit: str
    cpuset: str
    memory: str
    threads: str
    runs: int


@dataclass(frozen=True)
class Series:
    """One run's examples/s per slice (a distributed run's ranks added up), and the span
    its steady window covers, in the chart's seconds (slice i ends at ``slice * (i + 1)``;
    start == stop when it has no window)."""

    device: str
    slice: float
    rates: tuple[float, ...]
    steady: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class RunsSection:
    failed: tuple[FailedRun, ...] = ()
    isolation: tuple[IsolationRow, ...] = ()
    systems: tuple[dict[str, str], ...] = ()
    # test -> its runs' series, in file order, made when called
    series: Callable[[], dict[str, tuple[Series, ...]]] = dict
    about: About = field(default_factory=About)


def failed_runs(loaded: Loaded, many_nodes: bool) -> list[FailedRun]:
    rows = []
    for index, view in enumerate(loaded.results):
        if view.rate() is not None:
            continue
        path = loaded.paths[index]
        message = view.failure.message if view.failure is not None else None
        error = view.error or message or ""
        rows.append(
            FailedRun(
                view.name,
                view.job_id,
                view.device_label(many_nodes),
                view.failure_kind,
                message or "",
                path.name,
                "\n".join(error.splitlines()[-ERROR_TAIL_LINES:]),
            )
        )
    return rows


def _cpus(cpus: Any) -> str:
    """0,1,2,3,8 -> 0-3,8; "-" when the result does not say."""
    if not isinstance(cpus, list):
        return "-"
    return _cpu_text(tuple(c for c in cpus if isinstance(c, int)))


@functools.lru_cache(maxsize=4096)  # a fleet's 100,000 runs have a few CPU sets
def _cpu_text(cpus: tuple[int, ...]) -> str:
    return isolation.cpu_list(sorted(set(cpus))) or "-"


def _group(groups: Mapping[str, Any], controller: str) -> str:
    """The cgroup of a controller: its v1 hierarchy (alone or co-mounted), else the v2
    unified one (the ``""`` key), else "-"."""
    for key, path in groups.items():
        if controller in str(key).split(","):
            return str(path)
    return str(groups[""]) if "" in groups else "-"


def _setting(iso: Any) -> tuple[str, ...]:
    """(CPUs, memory limit, cpuset, memory cgroup, torch threads) of one run's isolation."""
    iso = iso if parts.is_mapping(iso) else {}
    groups = iso.get("cgroups")
    groups = groups if parts.is_mapping(groups) else {}
    limit = iso.get("memory_limit")
    threads = iso.get("torch_threads")
    return (
        _cpus(iso.get("cpus")),
        f"{limit / 2**30:.1f} GiB" if isinstance(limit, (int, float)) else "none",
        _group(groups, "cpuset"),
        _group(groups, "memory"),
        str(threads) if threads is not None else "-",
    )


def _merged(values: list[tuple[str, str]]) -> str:
    """One setting over an instance's runs, from (value, test) pairs: the value all share,
    else the most common one then each other one with the tests (or run count) that had it."""
    counts = Counter(v for v, _ in values)
    if len(counts) == 1:
        return values[0][0]
    ranked = sorted(counts, key=lambda v: (-counts[v], v))
    others = []
    for value in ranked[1:]:
        tests = sorted({t for v, t in values if v == value})
        named = ", ".join(tests) if len(tests) <= 3 else f"{counts[value]} runs"
        others.append(f"{value} ({named})")
    return "; ".join([ranked[0], *others])


def isolation_rows(results: Iterable[read.ResultView], many_nodes: bool) -> list[IsolationRow]:
    """The isolation each instance got: one row per device (``node/device`` across nodes),
    each setting merged over its runs (``_merged``), with its run count."""
    runs: dict[str, list[tuple[tuple[str, ...], str]]] = defaultdict(list)
    setting = parts.PerRecord(_setting)
    for view in results:
        runs[view.device_label(many_nodes)].append((setting(view.isolation_record), view.name))
    rows = []
    for device in sorted(runs, key=natural_key):
        items = runs[device]
        first = items[0][0]
        if all(s is first for s, _ in items):  # one setting (one PerRecord read): most
            cpus, limit, cpuset, memory, threads = first
        else:
            cpus, limit, cpuset, memory, threads = (
                _merged([(s[k], test) for s, test in items]) for k in range(5)
            )
        rows.append(IsolationRow(device, cpus, limit, cpuset, memory, threads, len(items)))
    return rows


def run_series(view: read.ResultView, many_nodes: bool) -> Series | None:
    """A run's rate per slice, its ranks added up slice by slice (None: no series)."""
    found = view.all_series()
    if not found or not all(s.rates for s in found):
        return None
    length = min(len(s.rates) for s in found)
    if len(found) == 1:  # one process (most runs): its own series, no sum slice by slice
        rates = found[0].rates
        total = rates if None not in rates else tuple(r or 0.0 for r in rates)
    else:
        total = tuple(sum((s.rates[i] or 0.0) for s in found) for i in range(length))
    width = found[0].slice
    return Series(view.device_label(many_nodes), width, total, steady.span(length, width))


def test_series(
    results: Iterable[read.ResultView], many_nodes: bool
) -> dict[str, tuple[Series, ...]]:
    by_test: dict[str, list[Series]] = defaultdict(list)
    for view in results:
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
        functools.partial(test_series, loaded.results, many_nodes),
        about(loaded.results, many_nodes),
    )
