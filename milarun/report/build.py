"""Report math: the per-test table, the weighted score, failure rate, price, GPU tables.

Everything here works on summaries (the baseline format), so a report can be made from a
results folder or from a summary file on a machine without torch. Presentation (text, JSON,
CSV, HTML) lives in milarun.report.render.text and milarun.report.render.html.
"""

from __future__ import annotations

import contextlib
import math
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from milarun.report import busy as report_busy
from milarun.report import comparability, perf, stats, summary_entry, tables, units
from milarun.report import energy as report_energy
from milarun.report import inference as report_inference
from milarun.report import nodes as report_nodes
from milarun.report.nodes import NodeReport
from milarun.report.runs import RunsSection, Series, runs_section
from milarun.results.folder import Loaded, Skipped

FAILURE_RATE_LIMIT = 0.01


@dataclass
class Report:
    """Everything a renderer needs; numbers only, no formatting."""

    title: str
    table: pd.DataFrame
    weights_source: str | None = None
    baseline_source: str | None = None
    penalize_variance: bool = False
    runs: int = 0
    failures: int = 0
    failure_rate: float = 0.0
    failure_kinds: dict[str, int] = field(default_factory=dict)
    interrupted: int = 0  # runs the operator stopped: not runs of the machine, not counted
    score: float | None = None
    score_ci: tuple[float, float] | None = None
    # the scored tests with fewer than two successful runs: the score has no interval then
    ran_once: list[str] = field(default_factory=list)
    coverage: float | None = None
    weighted_tests: int = 0
    scored: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unscored: list[str] = field(default_factory=list)
    unweighted: list[str] = field(default_factory=list)
    score_base: float | None = None
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None
    ratio_verdict: str | None = None
    common: list[str] = field(default_factory=list)
    unlike: list[str] = field(default_factory=list)  # in both, but a different workload
    price: float | None = None
    price_per_score: float | None = None
    gpu_tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    scaling: pd.DataFrame = field(default_factory=pd.DataFrame)
    natural: pd.DataFrame = field(default_factory=pd.DataFrame)  # see milarun.report.units
    inference: pd.DataFrame = field(default_factory=pd.DataFrame)  # milarun.report.inference
    quality: pd.DataFrame = field(default_factory=pd.DataFrame)
    warnings: list[str] = field(default_factory=list)
    busy: report_busy.Busy = field(default_factory=lambda: report_busy.Busy((), 0, 0))
    # GPU energy (milarun.report.energy): per test, the perf/W score, --power-cost
    energy: report_energy.EnergySection = field(
        default_factory=lambda: report_energy.EnergySection(pd.DataFrame())
    )
    nodes: NodeReport | None = None  # per node (milarun.report.nodes): --compare-nodes, fleets
    # From the result files (empty for a summary file: milarun.report.runs): when, where and
    # on what they ran (the header), the runs that failed with their log tails, the isolation
    # each instance had, the systems, each test's rate series (charts); the folder read and
    # the files in it that were no result.
    details: RunsSection = field(default_factory=RunsSection)
    source: str | None = None
    skipped: list[Skipped] = field(default_factory=list)
    # Made when first read (charts, JSON): the text report has no use for 100,000 series.
    _series: dict[str, tuple[Series, ...]] | None = field(default=None, repr=False)

    @property
    def series(self) -> dict[str, tuple[Series, ...]]:
        """Each test's rate series, in file order."""
        if self._series is None:
            self._series = self.details.series()
        return self._series

    @property
    def passed(self) -> bool:
        return self.failure_rate <= FAILURE_RATE_LIMIT

    @property
    def no_interval(self) -> str | None:
        """Why the score (and its ratio) has no interval, when it has none for that reason."""
        if not self.ran_once:
            return None
        return f"no interval: {len(self.ran_once)} of {len(self.scored)} tests ran once"

    @property
    def has_baseline(self) -> bool:
        return self.baseline_source is not None

    @property
    def test_weights(self) -> dict[str, float] | None:
        """Each test's weight as the table shows it; None when the report is unweighted."""
        if "weight" not in self.table.columns:
            return None
        return {str(t): float(w) for t, w in self.table["weight"].items()}


def build_report(
    summary: dict[str, dict[str, Any]],
    *,
    title: str | None = None,
    weights: tuple[str, dict[str, float]] | None = None,
    compare: tuple[str, dict[str, dict[str, Any]]] | None = None,
    price: float | None = None,
    penalize_variance: bool = False,
    compare_gpus: bool = False,
    power_cost: float | None = None,
    loaded: Loaded | None = None,
    compare_nodes: bool = False,
    pool: Executor | None = None,
    early: perf.EarlyIntervals | None = None,
) -> Report:
    """The report of a summary, optionally weighted, against a baseline, with a price and
    a power cost ($/kWh). ``loaded``: the result files it was made from, for what only they
    say (failed runs, isolation, systems, rate series, nodes); ``compare_nodes``: the node
    section with its significance flags even on one node. ``pool``: the bootstrap threads
    to use (perf.bootstrap_threads; else its own), ``early``: the tests' intervals started
    on them as the summary was made."""
    weight_map = weights[1] if weights else {}
    baseline = compare[1] if compare else {}
    weighted = [t for t, w in weight_map.items() if w > 0]
    tests = sorted(
        set(summary) | set(weighted) | {t for t in baseline if t in summary or t in weight_map}
    )
    ours = {t: perf.Perf.of(summary.get(t)) for t in tests}
    base = {t: perf.Perf.of(baseline.get(t)) for t in tests} if compare else {}
    # Legacy figures against legacy figures are like with like; milarun against legacy is not.
    legacy = comparability.is_legacy(baseline) and not comparability.is_legacy(summary)
    like = (
        {
            t: comparability.judge(t, legacy, summary.get(t))
            if t in baseline
            else comparability.NOT_IN_BASELINE
            for t in tests
        }
        if compare
        else {}
    )

    # The tests' weights as the table will show them (its "weight" column), for the nodes.
    table_weights = {t: float(weight_map.get(t, 0.0)) for t in tests} if weights and tests else None
    # The bootstraps computed on threads while the runs and nodes sections are read.
    scored = perf.scored(ours, weighted, summary, penalize_variance) if weights else {}
    # A bootstrap that holds single-run tests fixed is the interval of the others, not the
    # score's: none is given then (Report.no_interval says why).
    ran_once = sorted(t for t in scored if ours[t].n - ours[t].fail < 2)
    score_runs = perf.run_sets(ours, list(scored)) if scored and not ran_once else None
    with contextlib.nullcontext(pool) if pool else perf.bootstrap_threads() as threads:
        intervals = perf.intervals(ours, summary, threads, early)
        score_boot = (
            threads.submit(stats.score_interval, score_runs, weight_map, penalize_variance)
            if score_runs
            else None
        )
        details = runs_section(loaded)
        nodes = report_nodes.section(table_weights, loaded, test=compare_nodes)
        table = _table(
            tests, ours, base, weight_map if weights else None, penalize_variance, like, intervals
        )
    report = Report(
        title=title or "Benchmark results",
        table=table,
        weights_source=weights[0] if weights else None,
        baseline_source=compare[0] if compare else None,
        penalize_variance=penalize_variance,
        ran_once=ran_once,
        busy=report_busy.busy_of(summary),
    )
    report.runs = sum(ours[t].n for t in summary)
    report.failures = sum(ours[t].fail for t in summary)
    report.failure_rate = report.failures / report.runs if report.runs else 0.0
    typed = summary_entry.entries(summary).values()
    report.interrupted = sum(entry.interrupted or 0 for entry in typed)
    for entry in typed:
        for kind, count in (entry.failure_kinds or {}).items():
            report.failure_kinds[kind] = report.failure_kinds.get(kind, 0) + count
    if weights:
        _score(report, ours, base, weight_map, weighted, summary, scored)
        found = score_boot.result() if score_boot is not None else None
        if found:
            report.score_ci = found[1]
    if price is not None:
        report.price = price
        if report.score:
            report.price_per_score = price / report.score
    if compare_gpus:
        report.gpu_tables = tables.gpu_tables(summary)
    report.scaling = tables.scaling_table(summary)
    report.natural = units.natural_table(summary)
    report.inference = report_inference.inference_table(summary)
    report.quality = tables.quality_table(summary)
    report.warnings += tables.variant_warnings(summary) + tables.quality_warnings(summary)
    energy = report_energy.energy_section(summary, weight_map if weights else None, power_cost)
    report.warnings += energy.warnings
    report.energy = energy
    if not energy.table.empty and not report.table.empty:
        column = report_energy.COLUMN
        report.table[column] = energy.table[column].reindex(report.table.index)
    report.details = details
    if loaded is not None:
        report.source, report.skipped = str(loaded.root), list(loaded.skipped)
    report.nodes = nodes
    report.warnings += report.nodes.warnings() if report.nodes else []
    return report


def _table(
    tests: list[str],
    ours: dict[str, perf.Perf],
    base: dict[str, perf.Perf],
    weights: dict[str, float] | None,
    penalize_variance: bool,
    like: dict[str, tuple[str, str | None]],
    intervals: dict[str, Future[perf.Interval] | None],
) -> pd.DataFrame:
    rows = []
    for test in tests:
        mine = ours[test]
        row: dict[str, Any] = {"test": test}
        if weights is not None:
            row["weight"] = weights.get(test, 0.0)
        row.update(n=mine.n, fail=mine.fail, perf=mine.perf)
        started = intervals[test]
        interval = started.result() if started is not None else None
        row["ci_low"], row["ci_high"] = interval or (math.nan, math.nan)
        row["std%"] = 100 * mine.std / mine.perf if mine.perf > 0 else math.nan
        row["perf_adj"] = mine.adjusted(penalize_variance)
        if base:
            theirs = base[test]
            row["perf_base"] = theirs.perf
            row["perf_ratio"] = mine.perf / theirs.perf
            row["perf_base_adj"] = theirs.adjusted(penalize_variance)
            row["perf_ratio_adj"] = (
                row["perf_adj"] / row["perf_base_adj"] if row["perf_base_adj"] > 0 else math.nan
            )
            verdict = stats.welch_verdict(
                mine.perf,
                mine.std,
                mine.n - mine.fail,
                theirs.perf,
                theirs.std,
                theirs.n - theirs.fail,
            )
            row["p_value"] = verdict.p_value if verdict.p_value is not None else math.nan
            row["verdict"] = verdict.label
            row["comparable"], row["comparable_note"] = like[test]
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).set_index("test")


def _score(
    report: Report,
    ours: dict[str, perf.Perf],
    base: dict[str, perf.Perf],
    weights: dict[str, float],
    weighted: list[str],
    summary: dict[str, dict[str, Any]],
    scored: dict[str, float],
) -> None:
    report.weighted_tests = len(weighted)
    report.missing = sorted(t for t in weighted if t not in summary)
    # a test's runs with other settings (report.variants) are said apart, not listed here
    typed = summary_entry.entries(summary)
    report.unweighted = sorted(t for t in summary if t not in weights and not typed[t].variant_of)
    report.unscored = sorted(t for t in weighted if t in summary and t not in scored)
    report.scored = sorted(scored)
    total = sum(weights[t] for t in weighted)
    report.coverage = sum(weights[t] for t in scored) / total if total else None
    if report.missing:
        report.warnings.append(
            f"{len(report.missing)} weighted test(s) have no results: " + ", ".join(report.missing)
        )
    if report.unweighted:
        report.warnings.append(
            f"{len(report.unweighted)} test(s) are not in the weights "
            "(not scored): " + ", ".join(report.unweighted)
        )
    if report.unscored:
        report.warnings.append("failed every run (not scored): " + ", ".join(report.unscored))
    if not scored:
        return
    report.score = stats.weighted_geomean(scored, weights)  # its interval: build_report's
    if base:
        _compare_score(report, ours, base, weights, scored)


def _compare_score(
    report: Report,
    ours: dict[str, perf.Perf],
    base: dict[str, perf.Perf],
    weights: dict[str, float],
    scored: dict[str, float],
) -> None:
    """Score ratio on the tests both sides scored, with a paired-bootstrap interval."""
    pv = report.penalize_variance
    base_adj = {t: base[t].adjusted(pv) for t in scored}
    unlike = set(report.table.index[report.table["comparable"] == comparability.NO])
    common = sorted(t for t, v in base_adj.items() if v > 0 and t not in unlike)
    report.common = common
    report.unlike = sorted(t for t in unlike if t in scored and base_adj[t] > 0)
    if report.unlike:
        report.warnings.append(
            f"left out of the compared score as different workloads ({len(report.unlike)}): "
            + ", ".join(report.unlike)
        )
    if not common:
        report.warnings.append("no scored test is in the baseline: no score ratio")
        return
    if len(common) < len(scored):
        report.warnings.append(
            f"score ratio uses the {len(common)} of {len(scored)} scored tests that the "
            "baseline also has and measures alike"
        )
    mine = stats.weighted_geomean({t: scored[t] for t in common}, weights)
    report.score_base = stats.weighted_geomean({t: base_adj[t] for t in common}, weights)
    report.ratio = mine / report.score_base
    our_runs = perf.run_sets(ours, common)
    if our_runs is None or any(t in report.ran_once for t in common):
        return
    ours_boot = stats.score_interval(our_runs, weights, pv)
    if ours_boot is None:
        return
    base_boot = None
    base_runs = perf.run_sets(base, common)
    if base_runs is not None:
        found = stats.score_interval(base_runs, weights, pv, seed=stats.SEED + 1)
        base_boot = found[0] if found else None
    report.ratio_ci = stats.ratio_interval(ours_boot[0], base_boot, report.score_base)
    low, high = report.ratio_ci
    report.ratio_verdict = (
        "faster" if low > 1 else "slower" if high < 1 else "no significant change"
    )


def ratio_gate(report: Report, threshold: float) -> str | None:
    """The failure message of ``--fail-below`` (None when the gate passes)."""
    if report.ratio is None:
        return None
    if report.ratio < threshold:
        return f"score ratio {report.ratio:.4f} is below --fail-below {threshold:g}"
    return None
