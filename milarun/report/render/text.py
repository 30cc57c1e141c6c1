"""Report output as text (fits 100 columns, reads like the legacy report), JSON and CSV."""

from __future__ import annotations

import io
import json
import math
import textwrap
from typing import Any

import numpy as np
import pandas as pd

from milarun.report import energy as report_energy
from milarun.report.build import Report
from milarun.report.render import energy as render_energy
from milarun.report.render import format as fmt
from milarun.report.render import inference as render_inference
from milarun.report.render import nodes as render_nodes
from milarun.report.render import runs as render_runs
from milarun.report.render.scores import score_lines

FORMATS = ("text", "json", "csv")
__all__ = ["FORMATS", "render", "score_lines", "to_text"]
BUSY = " busy"  # beside a busy test's figures (report.busy)


def performance_table(report: Report) -> str:
    rows = {}
    busy = {t.test for t in report.busy.tests}
    for test, row in report.table.iterrows():
        cells = {}
        if "weight" in row:
            cells["weight"] = fmt.num(row["weight"], ".2f")
        cells.update(
            {
                "n": fmt.count(row["n"]),
                "fail": fmt.count(row["fail"]),
                "perf": fmt.num(row["perf"]) + (BUSY if test in busy else ""),
                "ci95": fmt.ci(row),
                "std%": fmt.num(row["std%"], ".1f"),
                "perf_adj": fmt.num(row["perf_adj"]),
            }
        )
        if report_energy.COLUMN in row:  # only where some test measured its energy
            cells["perf/W"] = fmt.sig(row[report_energy.COLUMN])
        rows[fmt.short(str(test))] = cells
    return fmt.frame(rows)


def comparison_table(report: Report) -> str:
    rows = {}
    busy = {t.test for t in report.busy.tests}
    for test, row in report.table.iterrows():
        rows[fmt.short(str(test))] = {
            "perf_base": fmt.num(row["perf_base"]),
            "perf_ratio": fmt.num(row["perf_ratio"], ".3f") + (BUSY if test in busy else ""),
            "perf_base_adj": fmt.num(row["perf_base_adj"]),
            "perf_ratio_adj": fmt.num(row["perf_ratio_adj"], ".3f"),
            "verdict": _verdict(row),
        }
    return fmt.frame(rows)


def comparability_notes(report: Report) -> list[str]:
    """Why each test that is not like with like differs from the baseline, one line each."""
    rows = report.table[report.table["comparable"] != "yes"]
    return [
        textwrap.fill(
            f"{test} ({row['comparable']}): {row['comparable_note']}",
            fmt.WIDTH,
            initial_indent="- ",
            subsequent_indent="  ",
        )
        for test, row in rows.iterrows()
    ]


def scaling_text(df: pd.DataFrame) -> str:
    rows = {}
    for test, r in df.iterrows():
        cells = {"k": fmt.count(r["k"])}
        if "nodes" in df.columns:  # multi-node runs: on how many nodes
            cells["nodes"] = fmt.count(r["nodes"])
        rows[fmt.short(str(test))] = {
            **cells,
            "per rank": fmt.num(r["per_rank"]),
            "total": fmt.num(r["total"]),
            "efficiency": fmt.num(r["efficiency"], ".1%"),
        }
    return fmt.frame(rows)


def _verdict(row: pd.Series) -> str:
    p = row["p_value"]
    if row["verdict"] in ("faster", "slower") and math.isfinite(p):
        return f"{row['verdict']} ({fmt.p_text(p)})"
    return str(row["verdict"])


def gpu_table(df: pd.DataFrame) -> str:
    rows = {
        fmt.short(str(test)): {str(dev): fmt.num(v, ".0%") for dev, v in row.items()}
        for test, row in df.iterrows()
    }
    return fmt.frame(rows)


def quality_table(report: Report) -> str:
    """Steady-state diagnostics, start-up cost (seconds) and FLOP/s per test."""
    rows = {}
    for test, row in report.quality.iterrows():
        split = "/".join(fmt.num(row[k], ".1f") for k in ("import", "setup", "first_step"))
        peak = row["percent_of_peak"]
        measured = row.get("percent_of_measured_peak")
        rows[fmt.short(str(test))] = {
            "slices": fmt.num(row["slices"], ".0f"),
            "cv%": fmt.num(100 * row["cv"], ".1f"),
            "drift%": fmt.num(100 * row["drift"], "+.1f"),
            "warmup": fmt.num(row["warmup"], ".1f"),
            "start": fmt.num(row["to_first_slice"], ".1f"),
            "imp/set/1st": split,
            "FLOP/s": fmt.si(row["achieved_flops"])
            + (f" {peak:.0f}%" if peak is not None and math.isfinite(peak) else "")
            + (
                f" gemm {measured:.0f}%" if measured is not None and math.isfinite(measured) else ""
            ),
            "flags": row["flags"] or "-",
        }
    return fmt.frame(rows)


def to_text(report: Report) -> str:
    bar = "=" * min(fmt.WIDTH, max(len(report.title), 40))
    out = [bar, report.title, bar, *render_runs.about_text(report)]
    if report.weights_source:
        out.append(f"weights:  {report.weights_source}")
    if report.baseline_source:
        out.append(f"baseline: {report.baseline_source}")
    if report.penalize_variance:
        out.append("perf_adj is penalised by one standard deviation (--penalize-variance)")
    out.append("")
    if report.table.empty:
        out.append("(no tests)")
    else:
        out.append(performance_table(report))
        if report.has_baseline:
            out += fmt.section("Comparison with the baseline")
            out.append(comparison_table(report))
            notes = comparability_notes(report)
            if notes:
                out += fmt.section("Like with like? Every test not listed here is 'yes'")
                out.append(
                    "approx: the same workload with a known difference; no: a different workload,"
                )
                out.append("left out of the compared score.")
                out += notes
    out += fmt.section("Scores")
    out += score_lines(report)
    if report.score is not None:
        out.append(
            textwrap.fill(
                "The score is the weighted geometric mean of the scored tests' perf_adj "
                "(examples/s in each test's unit): it compares only with a score of the same "
                "suite and weights, as a ratio against a baseline of that suite.",
                fmt.WIDTH,
            )
        )
    if not report.quality.empty:
        out += fmt.section("Measurement quality (mean of runs; times in seconds)")
        out.append(quality_table(report))
        if report.quality["percent_of_measured_peak"].notna().any():
            out += [
                "FLOP/s: achieved, % of the datasheet peak, and 'gemm N%' of the peak the gemm "
                "test measured",
                "on the same device in the same precision (not for gemm itself)",
            ]
    out += render_energy.text_section(report)
    out += render_inference.text_section(report)
    if not report.scaling.empty:
        out += fmt.section("Scaling (examples/s; per rank is the scored, legacy figure)")
        out.append(scaling_text(report.scaling))
    out += units_section(report)
    for measure, df in report.gpu_tables.items():
        out += fmt.section(f"GPU comparison ({measure}, fraction of the best device)")
        out.append(gpu_table(df))
    out += render_nodes.text_section(report)
    out += render_runs.text_section(report)
    if report.warnings:
        out += fmt.section("Warnings")
        out += [
            textwrap.fill(
                w, fmt.WIDTH, initial_indent="- ", subsequent_indent="  ", break_on_hyphens=False
            )
            for w in report.warnings
        ]
    return "\n".join(out) + "\n"


def to_json(report: Report) -> str:
    return json.dumps(to_records(report), indent=2) + "\n"


def to_csv(report: Report) -> str:
    """The per-test table, one row per test, every numeric column unrounded; then, each
    after a blank line, the per-node blocks with --compare-nodes (render.nodes.csv_blocks)
    and the failed runs and isolation rows (render.runs.csv_blocks)."""
    buf = io.StringIO()
    report.table.to_csv(buf, float_format="%.10g")
    return buf.getvalue() + render_nodes.csv_blocks(report.nodes) + render_runs.csv_blocks(report)


def render(report: Report, fmt: str) -> str:
    return {"text": to_text, "json": to_json, "csv": to_csv}[fmt](report)


def to_records(report: Report) -> dict[str, Any]:
    """The report as plain data (the JSON output)."""
    table = report.table.replace({np.nan: None}) if not report.table.empty else report.table
    tests = {t: {k: _plain(v) for k, v in row.items()} for t, row in table.iterrows()}
    data = {
        "title": report.title,
        "weights": report.weights_source,
        "baseline": report.baseline_source,
        "penalize_variance": report.penalize_variance,
        "tests": tests,
        "scores": {
            "runs": report.runs,
            "failures": report.failures,
            "failure_rate": report.failure_rate,
            "passed": report.passed,
            "failure_kinds": report.failure_kinds,
            **({"interrupted": report.interrupted} if report.interrupted else {}),
            "score": report.score,
            "score_ci95": report.score_ci,
            **({"no_interval": report.no_interval} if report.no_interval else {}),
            "coverage": report.coverage,
            "scored": report.scored,
            "missing": report.missing,
            "unscored": report.unscored,
            "unweighted": report.unweighted,
            "score_base": report.score_base,
            "ratio": report.ratio,
            "ratio_ci95": report.ratio_ci,
            "ratio_verdict": report.ratio_verdict,
            "common_tests": report.common,
            "not_compared": report.unlike,
            "price": report.price,
            "price_per_score": report.price_per_score,
        },
        "scaling": {
            t: {k: _plain(v) for k, v in row.items()} for t, row in report.scaling.iterrows()
        },
        "gpu": {
            m: {t: {d: _plain(v) for d, v in row.items()} for t, row in df.iterrows()}
            for m, df in report.gpu_tables.items()
        },
        "quality": {
            t: {k: _plain(v) for k, v in row.items()} for t, row in report.quality.iterrows()
        },
        "natural": units_records(report.natural),
        "nodes": render_nodes.records(report.nodes),
        "warnings": report.warnings,
        **render_runs.records(report),
    }
    render_energy.add_records(data, report)
    render_inference.add_records(data, report)
    return data


def units_section(report: Report) -> list[str]:
    """The "Natural units" block of the text report (nothing when no test has one)."""
    if report.natural.empty:
        return []
    rows = {
        fmt.short(str(test)): {
            "perf": fmt.num(r["perf"]),
            "per example": fmt.plain(r["per_example"], 4),
            "natural/s": fmt.num(r["natural"]),
            "unit": r["unit"],
        }
        for test, r in report.natural.iterrows()
    }
    title = "Natural units (perf: the scored, legacy unit; natural/s = perf x per example)"
    return fmt.section(title) + [fmt.frame(rows)]


def units_records(table: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """The table as plain data (the JSON report's ``natural``)."""
    return {
        str(test): {
            "unit": r["unit"],
            "perf": float(r["perf"]),
            "per_example": float(r["per_example"]),
            "natural": float(r["natural"]),
        }
        for test, r in table.iterrows()
    }


def _plain(value: Any) -> Any:
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
