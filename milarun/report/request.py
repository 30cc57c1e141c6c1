"""`milarun report`: a results folder or summary, with weights, a baseline, a price and an
HTML page, turned into the rendered report and the CI gate's verdict."""

from __future__ import annotations

import math
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from milarun import errors
from milarun.report import summary
from milarun.results import manifest
from milarun.results.folder import Skipped, gc_paused

if TYPE_CHECKING:
    from milarun.report.perf import EarlyIntervals


@dataclass(frozen=True)
class ReportRequest:
    source: Path
    weights: str | None = None
    compare: str | None = None  # shipped name (standard/v100), summary file or results folder
    compare_gpus: bool = False
    compare_nodes: bool = False  # per-node scores, node x device matrix, slow-node flags
    price: float | None = None
    power_cost: float | None = None  # $/kWh: the energy cost of a million examples
    penalize_variance: bool = False
    html: Path | None = None
    title: str | None = None
    fail_below: float | None = None
    format: str = "text"
    # Score only these tests (what a run was asked to do: the rest is not "missing")
    only_tests: frozenset[str] | None = None


@dataclass(frozen=True)
class ReportOutcome:
    text: str  # the report in the asked format
    skipped: list[Skipped] = field(default_factory=list)  # files that were not results
    html: Path | None = None
    gate_failure: str | None = None  # why --fail-below failed, if it did
    incomplete: bool = False  # no result at all, only runs cut short: exit 1


def make_report(request: ReportRequest) -> ReportOutcome:
    """Check the request, load both sides, build and render the report (and its page)."""
    from milarun.report import perf

    check(request)
    # the bootstrap threads: each test's interval starts as its summary entry is made
    with perf.bootstrap_threads() as pool:
        early = perf.EarlyIntervals(pool)
        sides = load(request, early)
        if isinstance(sides, ReportOutcome):
            return sides
        return build(request, sides, pool, early)


def check(request: ReportRequest) -> None:
    """Refuse a request that cannot be made, before anything is read or written."""
    from milarun.report.render.text import FORMATS

    if request.format not in FORMATS:
        raise errors.UsageError(f"--format {request.format}: use one of {', '.join(FORMATS)}")
    if request.fail_below is not None and request.compare is None:
        raise errors.UsageError("--fail-below needs --compare BASELINE")
    if request.price is not None and not request.price > 0:
        raise errors.UsageError(f"--price {request.price}: must be a positive number of dollars")
    if request.power_cost is not None and not 0 < request.power_cost < math.inf:
        raise errors.UsageError(
            f"--power-cost {request.power_cost}: must be a positive number of dollars per kWh"
        )
    if request.html:
        from milarun.report.render import html  # matplotlib: only for the page

        html.check_html_path(request.html)  # before any work: never overwrite a foreign file


@dataclass(frozen=True)
class Sides:
    """What a report compares: its source, the baseline, and the weights of the tests it
    scores."""

    src: summary.Source
    base: summary.Source | None
    weights: tuple[str, dict[str, float]] | None


def load(request: ReportRequest, early: EarlyIntervals) -> Sides | ReportOutcome:
    """Both sides and the weights; the outcome of a folder of runs cut short before their
    first result (what they planned and lost)."""
    from milarun.report.weights import default_weights, load_weights

    try:
        src = summary.load_source(request.source, early.start)
    except errors.EmptyResults:
        cuts = manifest.cut_short(request.source) if Path(request.source).is_dir() else []
        if not cuts:
            raise
        # a run killed before its first result: say what it planned and lost, exit 1
        lines = [f"{request.source}: no milarun results found"] + [
            f"- {cut.describe()}: no result for {cut.missing()}" for cut in cuts
        ]
        return ReportOutcome("\n".join(lines) + "\n", incomplete=True)
    if request.compare_nodes and src.loaded is None:
        raise errors.UsageError(
            f"--compare-nodes: {request.source} is a summary file, which "
            "keeps no node; pass the results folder"
        )
    base = summary.load_source(summary.baseline_path(request.compare)) if request.compare else None
    if base is not None and src.summary and not set(src.summary) & set(base.summary):
        ours = ", ".join(sorted({t.split(".", 1)[0] for t in src.summary}))
        theirs = ", ".join(sorted({t.split(".", 1)[0] for t in base.summary}))
        raise errors.UsageError(
            f"--compare {request.compare}: the baseline has none of these tests (suite "
            f"{ours} against suite {theirs}): compare with a baseline of the same suite "
            "(milarun/baselines/<suite>/)"
        )
    weights = (
        load_weights(request.weights) if request.weights else default_weights(list(src.summary))
    )
    only = request.only_tests
    if only is None and src.loaded is not None:
        # what the runs here planned (their manifests) or measured: a test the weights name
        # that no run here was asked to do (scaling.2 on one device) is not "missing"
        planned = manifest.planned_since(request.source, 0.0)
        only = frozenset(planned | set(src.summary)) if planned else None
    if weights and only is not None:
        weights = (weights[0], {t: w for t, w in weights[1].items() if t in only})
    return Sides(src, base, weights)


def pooled_runs(folder: Path) -> list[str]:
    """Where several `milarun jobs` wrote into one folder (the same command again, after a
    Ctrl-C: the default folder is one per day), that each test pools their results."""
    if not Path(folder).is_dir():
        return []
    runs = manifest.run_manifests(folder, recursive=False)
    if len(runs) < 2:
        return []
    times = [run.started_at for _, run in runs]
    shown = ", ".join(
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
        if isinstance(t, int | float)
        else "?"
        for t in times[:5]
    )
    return [
        f"{len(runs)} runs of `milarun jobs` wrote into this folder (started {shown}"
        f"{', ...' if len(runs) > 5 else ''}): each test pools the results of all of them; "
        "`jobs -o FOLDER` gives a run a folder of its own"
    ]


def build(
    request: ReportRequest, sides: Sides, pool: Executor, early: EarlyIntervals
) -> ReportOutcome:
    """The report of both sides, rendered, its page written and its gate judged."""
    from milarun.report.build import build_report, ratio_gate  # pandas: only here
    from milarun.report.render.text import render

    src, base = sides.src, sides.base
    # A fleet run's sections make millions of objects and no garbage cycles: the GC's
    # rescans of them would be most of the time of its report after the load.
    with gc_paused():
        rep = build_report(
            src.summary,
            title=request.title,
            weights=sides.weights,
            compare=(str(base.path), base.summary) if base else None,
            price=request.price,
            penalize_variance=request.penalize_variance,
            compare_gpus=request.compare_gpus,
            power_cost=request.power_cost,
            loaded=src.loaded,
            compare_nodes=request.compare_nodes,
            pool=pool,
            early=early,
        )
    if src.loaded is not None:  # a results folder: a run cut short says what it never did
        # an instance a later run into the folder measured is no longer without a result
        recorded = {(v.name, v.job_id) for v in src.loaded.results}
        rep.warnings += [
            f"{cut.describe()}: "
            + (
                f"no result for {cut.missing()}"
                if cut.without_result
                else "each of its tests has a result"
            )
            for cut in manifest.cut_short(request.source, recorded)
        ]
        rep.warnings += pooled_runs(request.source)
    skipped = [
        s
        for item in (src, base)
        if item is not None and item.loaded is not None
        for s in item.loaded.skipped
    ]
    if request.html:
        from milarun.report.render import html

        html.write_html(request.html, html.to_html(rep))
    gate = None
    if request.fail_below is not None:
        if rep.ratio is None:
            raise errors.UsageError(
                "--fail-below: no score ratio (are weights and baseline tests in common?)"
            )
        gate = ratio_gate(rep, request.fail_below)
    return ReportOutcome(render(rep, request.format), skipped, request.html, gate)
