"""The summary's side tables of a report: measurement quality, scaling and per-device."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from milarun.report import busy as report_busy
from milarun.report.nodes import device_order
from milarun.report.summary_entry import Quality, entries
from milarun.results.records import StartupCost

NO_STARTUP = StartupCost()


def finite_or_nan(value: Any) -> float:
    """A finite float, else NaN (a summary value may be anything)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def quality_table(summary: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Per test: steady-state diagnostics, start-up cost and efficiency (mean of runs)."""
    rows = {}
    for test, entry in entries(summary).items():
        q = entry.measured
        if q.slices is None:
            continue  # a summary without diagnostics (legacy, or every run failed)
        start = q.startup or NO_STARTUP
        rows[test] = {
            "slices": q.slices,
            "cv": q.cv,
            "drift": q.drift,
            "warmup": q.warmup,
            "to_first_slice": start.to_first_slice,
            "import": start.imports,
            "setup": start.setup,
            "first_step": start.first_step,
            "flops_per_example": q.flops_per_example,
            "achieved_flops": q.achieved_flops,
            "percent_of_peak": q.percent_of_peak,
            "percent_of_measured_peak": q.percent_of_measured_peak,
            "power_limit": q.power_limit,
            "sm_clock": q.sm_clock,
            "flags": _flags(q),
        }
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame.from_dict(rows, orient="index").sort_index()
    return df.astype({c: float for c in df.columns if c != "flags"})


def _flags(quality: Quality) -> str:
    """``flag:runs`` each; busy with its worst run's share of the CPUs: ``busy:3 (62%)``."""
    worst = quality.busy.others if quality.busy is not None else None
    shown = report_busy.share(worst if isinstance(worst, float) else None)
    return ",".join(
        f"{k}:{v}" + (f" ({shown})" if k == "busy" and shown else "")
        for k, v in (quality.flagged or {}).items()
    )


def variant_warnings(summary: dict[str, dict[str, Any]]) -> list[str]:
    """One line per group of runs kept apart from its test (milarun.report.variants)."""
    return [
        f"{entry.variant_of}: {entry.n} run(s) with other settings ({entry.differs}) "
        f"are reported apart as '{test}': never averaged with it, not scored"
        for test, entry in sorted(entries(summary).items())
        if entry.variant_of
    ]


def quality_warnings(summary: dict[str, dict[str, Any]]) -> list[str]:
    """Tests whose runs drifted beyond 2% or had too few slices for a full window."""
    drift, few = [], []
    typed = sorted(entries(summary).items())
    for test, entry in typed:
        flagged = entry.measured.flagged or {}
        if flagged.get("drift"):
            worst = entry.measured.drift or 0.0
            drift.append(f"{test} ({flagged['drift']} run(s), worst {worst:+.1%})")
        if flagged.get("few-slices"):
            few.append(f"{test} ({flagged['few-slices']} run(s))")
    out = []
    if drift:
        out.append("rate drifted beyond 2% over the steady window: " + ", ".join(drift))
    short = [test for test, entry in typed if (entry.measured.flagged or {}).get("short-window")]
    if short:
        named = ", ".join(short) if len(short) <= 6 else f"{len(short)} tests"
        out.append(
            "drift not judged on steady windows shorter than the full 9 s (raise --min-slices "
            f"to 22 to judge it): {named}"
        )
    if few:
        out.append("steady window shorter than 5 s (raise --min-slices): " + ", ".join(few))
    busy = report_busy.warning(report_busy.busy_of(summary))
    return out + ([busy] if busy else [])


def scaling_table(summary: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Distributed tests (``<suite>.<test>.<k>``, k ranks): [nodes], mean per rank (the
    scored, legacy figure), total over the ranks, and efficiency = total / ((k / k0) x the
    total at k0), k0 the smallest k of that test (k = 1 when present; scaling.8 for 1x8)."""
    found = {}
    for test, entry in entries(summary).items():
        total = entry.throughput.mean if entry.throughput is not None else None
        prefix, _, size = test.rpartition(".")
        if total is not None and size.isdigit() and int(size) > 0:
            found[test] = (prefix, int(size), total, entry)
    base = {p: min((k, t) for q, k, t, _ in found.values() if q == p) for p, *_ in found.values()}
    rows = {}
    for test, (prefix, k, total, entry) in found.items():
        k0, total0 = base[prefix]
        rows[test] = {
            "k": k,
            "per_rank": entry.mean_rate,
            "total": total,
            "efficiency": total / (k / k0 * total0) if total0 else math.nan,
        }
        if entry.nodes is not None:
            rows[test]["nodes"] = entry.nodes
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame.from_dict(rows, orient="index").sort_values("k", kind="stable")
    return df.astype(
        {c: float for c in ("per_rank", "total", "efficiency", "nodes") if c in df.columns}
    )


def gpu_tables(summary: dict[str, dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """Per test, each device's mean/min/max rate as a fraction of the best device."""
    tables = {}
    for measure in ("mean", "min", "max"):
        rows = {}
        for test, entry in entries(summary).items():
            pergpu = entry.pergpu or {}
            values = {dev: finite_or_nan(getattr(s, measure)) for dev, s in pergpu.items()}
            values = {d: v for d, v in values.items() if v > 0}
            if len(values) > 1:  # one device alone says nothing about balance
                best = max(values.values())
                rows[test] = {d: v / best for d, v in values.items()}
        if rows:
            df = pd.DataFrame.from_dict(rows, orient="index")
            tables[measure] = df[sorted(df.columns, key=device_order)].sort_index()
    return tables
