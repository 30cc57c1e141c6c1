"""The inference block of a report (milarun.report.inference's table) as text, plain data
and HTML rows: nothing at all for a report without an inference test."""

from __future__ import annotations

import math
from typing import Any

from milarun.report.build import Report
from milarun.report.render import format as fmt

TITLE = "Inference (mean of runs; times in ms; perf = output tokens/s)"
NOTE = [
    "TTFT: time to first token, from when the request was due; TPOT: time per output token",
    "after the first (llm-decode: its headline batch's step time, no percentile); ITL: the gaps",
    "between tokens; good%: requests within TTFT <= 2 s and TPOT <= 100 ms (MLPerf's limits, or",
    "the test's); MBU: bytes a decode step reads x steps/s / the datasheet's memory bandwidth;",
    "J/token: the GPU's energy per output token. Engine: name, version, precision, in/out",
    "tokens, concurrency (batch): runs of another engine or setting are another line.",
]


def _tpot(row: Any) -> Any:
    """The TPOT p50 of llm-serve, else llm-decode's mean step time."""
    value = row["tpot_p50_ms"]
    return row["tpot_ms"] if value is None or not math.isfinite(value) else value


def cells(row: Any) -> dict[str, str]:
    """One test's cells, formatted (text and HTML alike)."""
    return {
        "TTFT p50": fmt.sig(row["ttft_p50_ms"]),
        "TTFT p99": fmt.sig(row["ttft_p99_ms"]),
        "TPOT p50": fmt.sig(_tpot(row)),
        "TPOT p99": fmt.sig(row["tpot_p99_ms"]),
        "ITL p99": fmt.sig(row["itl_p99_ms"]),
        "good%": fmt.num(row["goodput_percent"], ".0f"),
        "MBU%": fmt.num(row["mbu_percent"], ".1f"),
        "J/token": fmt.sig(row["joules_per_token"]),
        "engine": str(row["engine"]),
    }


def text_section(report: Report) -> list[str]:
    if report.inference.empty:
        return []
    rows = {fmt.short(str(test)): cells(row) for test, row in report.inference.iterrows()}
    return fmt.section(TITLE) + [fmt.frame(rows), *NOTE]


def html_rows(report: Report) -> list[dict[str, Any]]:
    """The rows of the HTML table: the test and its cells."""
    return [{"test": str(t), "cells": cells(row)} for t, row in report.inference.iterrows()]


def add_records(data: dict[str, Any], report: Report) -> None:
    """The JSON report's ``inference``, only where there is one."""
    if report.inference.empty:
        return
    data["inference"] = {
        str(test): {
            str(k): (v if isinstance(v, str) else float(v) if math.isfinite(v) else None)
            for k, v in row.items()
        }
        for test, row in report.inference.iterrows()
    }
