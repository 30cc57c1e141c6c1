"""Summary (the baseline format): per test, run counts and rate statistics.

Keys per test follow the legacy baseline files: ``n``, ``failures``, ``total`` (stats of
the program time), ``train`` (stats of the steady rates), ``pergpu`` and ``peak_memory``.
Two keys are added and ignored by legacy readers: ``rates`` (each successful run's steady
rate, so a report can bootstrap confidence intervals from a summary file) and
``failure_kinds`` (how many runs failed of each kind); a test counted in a legacy unit also
has ``natural`` ({unit, per_example}, see milarun.report.units).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milarun import results
from milarun.errors import EmptyResults, SummaryError
from milarun.report import energy, measured_peak, units, variants
from milarun.report import inference as report_inference
from milarun.report.summary_entry import Quality, Stats, SummaryEntry
from milarun.report.summary_file import load_summary_file
from milarun.results import read
from milarun.results import throttle as gpu_throttle
from milarun.results.folder import Loaded, gc_paused, load_dir
from milarun.results.records import Contention, StartupCost


def stats(values: list[float]) -> dict[str, Any]:
    """{n, min, max, mean, std} with the population std; null stats when empty."""
    return Stats.of(values).to_dict()


def summarize(
    loaded: Sequence[read.ResultView | Mapping[str, Any]],
    made: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Group results by test name; a test whose runs all failed keeps null stats.

    ``pergpu`` keys are the devices (``cpu:0``, ``0``), or ``<node>/<device>`` when the
    results span more than one node (two nodes' ``cpu:0`` are two devices). Runs of one
    test made with other settings are a test of their own (milarun.report.variants), with
    ``variant_of`` and ``differs``. ``made``: called with each test's entry once made (the
    report starts its bootstrap then)."""
    views = read.views(loaded)  # a folder's are views; a run's results just written are not
    by_name: dict[str, list[read.ResultView]] = defaultdict(list)
    for view in views:
        by_name[view.name].append(view)
    many_nodes = read.spans_nodes(views)
    gemm_peaks = measured_peak.measured_peaks(views)  # a gemm run's, per device, precision
    out = {}
    for name in sorted(by_name):
        for key, runs, differs in variants.split(name, by_name[name]):
            out[key] = _entry(runs, many_nodes, gemm_peaks)
            if differs:
                out[key].update(variant_of=name, differs=differs)
            if made is not None:
                made(key, out[key])
    return out


def _entry(
    runs: list[read.ResultView], many_nodes: bool, gemm_peaks: measured_peak.Peaks | None = None
) -> dict[str, Any]:
    """One test's summary entry from its runs."""
    rates: list[float] = []
    programs: list[float] = []
    pergpu: dict[str, list[float]] = defaultdict(list)
    peaks: list[float] = []
    kinds: Counter[str] = Counter()
    good: list[read.ResultView] = []
    totals: list[float] = []  # distributed runs: all ranks together
    spans: list[int] = []  # a distributed test: how many nodes its ranks ran on
    interrupted = 0  # stopped by the operator (Ctrl-C, a signal): no run of the machine's
    for view in runs:
        spanned = view.rank_nodes
        if spanned:
            spans.append(spanned)
        rate = view.rate()
        if rate is None:
            if view.failure_kind == "interrupted":
                interrupted += 1
            else:
                kinds[view.failure_kind] += 1
            continue
        rates.append(rate)
        ranks = view.rank_rates()
        if ranks is not None:  # the rate is the mean of the ranks: total = mean x k
            totals.append(rate * len(ranks))
        good.append(view)
        program = view.program_time
        if program is not None:
            programs.append(program)
        if view.device_key is not None:
            pergpu[view.device_label(many_nodes)].append(rate)
        peak = view.peak_memory
        if peak is not None:
            peaks.append(peak)
    return SummaryEntry(
        n=len(runs) - interrupted,
        failures=sum(kinds.values()),
        total=Stats.of(programs),
        train=Stats.of(rates),
        pergpu={device: Stats.of(v) for device, v in sorted(pergpu.items())},
        peak_memory=max(peaks) if peaks else None,
        rates=tuple(rates),
        failure_kinds=dict(sorted(kinds.items())),
        quality=quality(good, gemm_peaks),
        **energy.summary_entries(good),  # "energy", "throttle", "node_energy" where measured
        interrupted=interrupted or None,
        **conditions(good),  # "dataset", "tf32", "nocache" where the runs record them
        # scaling.k: train is the mean per rank, throughput all k ranks
        throughput=Stats.of(totals) if totals else None,
        nodes=max(spans) if spans else None,
        # an inference test: latency, goodput, MBU (report.inference)
        inference=report_inference.summary_entry(good),
        # the test counts in a legacy unit: the natural one per counted example
        natural=units.natural(good) or None,
    ).to_dict()


def conditions(views: list[read.ResultView]) -> dict[str, Any]:
    """What the successful runs ran under that decides whether they compare with the 2020
    figures (milarun.report.comparability), each key only where the runs record it:
    ``dataset``, the smallest set they read; ``tf32``, on a device that runs TF32, whether
    torch let its fp32 matmuls and its cuDNN work (convolutions, RNNs) run as TF32 in any
    run; ``nocache``, whether every run's reads bypassed the page cache, as under the
    legacy profiles' ``nocache``."""
    found: dict[str, Any] = {}
    datasets = [d for v in views if (d := v.dataset) is not None]
    if datasets:
        found["dataset"] = min(datasets, key=lambda d: d.size or 0).to_dict()
    settings = [e.math for v in views if (e := v.efficiency) is not None]
    tf32 = [s for s in settings if s is not None and s.tf32_capable is True]
    if tf32:
        found["tf32"] = {
            "matmul": any(s.tf32_matmul is True for s in tf32),
            "cudnn": any(s.tf32_cudnn is True for s in tf32),
        }
    caches = [i.nocache for v in views if (i := v.isolation) is not None]
    known = [c for c in caches if isinstance(c, bool)]
    if known:
        found["nocache"] = all(known)
    return found


def _mean_of(values: list[Any]) -> float | None:
    # fsum overflows past 1e300
    numbers = [float(v) for v in values if results.is_finite(v) and abs(v) <= 1e300]
    return math.fsum(numbers) / len(numbers) if numbers else None


def quality(views: list[read.ResultView], peaks: measured_peak.Peaks | None = None) -> Quality:
    """How trustworthy the runs' rates are (issue: steady-state diagnostics), and their
    start-up cost and efficiency, averaged over the successful runs (``peaks``: a gemm
    run's measured peaks, for ``percent_of_measured_peak``)."""
    diags = [v.diagnostics() for v in views]
    starts = [v.startup for v in views]
    effs = [e for v in views if (e := v.efficiency) is not None]
    drifts = [d.drift for d in diags if results.is_finite(d.drift)]
    flagged: Counter[str] = Counter(f for d in diags for f in gpu_throttle.flags(d))
    throttles = [gpu_throttle.read(d.throttle) for d in diags]
    judged = [t for t in throttles if t is not None and t.window_slices]
    clocks = [t.sm_clock_mhz for t in judged if t.sm_clock_mhz is not None]
    return Quality(
        slices=_mean_of([d.slices for d in diags]),
        cv=_mean_of([d.cv for d in diags]),
        drift=max(drifts, key=abs) if drifts else None,  # the worst run
        warmup=_mean_of([d.warmup for d in diags]),
        flagged=dict(sorted(flagged.items())),
        # the GPU's operating point: steady slices at its power limit, its median SM clock
        power_limit=(
            sum(t.power_limit_slices for t in judged) / sum(t.window_slices for t in judged)
            if judged
            else None
        ),
        sm_clock=statistics.median_high(clocks) if clocks else None,
        busy=_worst_contention([d.contention for d in diags]),
        startup=StartupCost(
            _mean_of([st.imports for st in starts]),
            _mean_of([st.setup for st in starts]),
            _mean_of([st.first_step for st in starts]),
            _mean_of([st.to_first_slice for st in starts]),
        ),
        flops_per_example=_mean_of([e.flops_per_example for e in effs]),
        achieved_flops=_mean_of([e.achieved_flops for e in effs]),
        percent_of_peak=_mean_of([e.percent_of_peak for e in effs]),
        percent_of_measured_peak=_mean_of(
            [measured_peak.percent_of_measured(v, peaks or {}) for v in views]
        ),
    )


def _worst_contention(found: list[Contention | None]) -> Contention | None:
    """The run whose CPUs other processes took most of (milarun.measure.contention)."""
    shares = [c for c in found if c is not None]
    if not shares:
        return None
    worst = max(shares, key=lambda c: c.others)
    load = worst.load if worst.load is not None and results.is_finite(worst.load) else None
    return Contention(worst.others, worst.cpus, float(load) if load is not None else None)


@dataclass
class Source:
    """What a report reads: a summary, plus the results behind it when it was a folder."""

    path: Path
    summary: dict[str, dict[str, Any]]
    loaded: Loaded | None = None


BASELINE_DIR = Path(__file__).parent.parent / "baselines"


def baseline_path(spec: str) -> Path:
    """A baseline by path (summary file or results folder) or shipped name (``standard/v100``)."""
    path = Path(spec)
    if path.exists():
        return path
    shipped = BASELINE_DIR / f"{spec.removesuffix('.json')}.json"
    if shipped.is_file():
        return shipped
    names = ", ".join(
        sorted(
            str(p.relative_to(BASELINE_DIR).with_suffix("")) for p in BASELINE_DIR.glob("*/*.json")
        )
    )
    raise SummaryError(
        f"--compare {spec}: no such file or folder, nor a shipped baseline ({names})"
    )


def load_source(path: Path, made: Callable[[str, dict[str, Any]], None] | None = None) -> Source:
    """A results folder (summarised here: ``made`` as summarize's) or a summary JSON file."""
    path = Path(path)
    if path.is_dir():
        loaded = load_dir(path)
        if not loaded.results:
            why = (
                f"{len(loaded.skipped)} JSON file(s) skipped, e.g. {loaded.skipped[0].path}: "
                f"{loaded.skipped[0].reason}"
                if loaded.skipped
                else "no JSON files"
            )
            raise EmptyResults(
                f"{path}: no milarun results found ({why}); run "
                f"`milarun jobs PROFILE -o {path}` first"
            )
        with gc_paused():  # millions of short-lived objects, no cycles: see build_report
            found = summarize(loaded.results, made)
        return Source(path, found, loaded)
    if not path.exists():
        raise SummaryError(f"{path}: no such file or folder")
    return Source(path, load_summary_file(path))
