"""Report math and text output."""

from __future__ import annotations

from typing import Any

import pandas as pd


def table(summary: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per test: n, fail, perf (mean steady examples/s), std%."""
    rows = []
    for name, entry in summary.items():
        train = entry["train"]
        perf = train["mean"]
        rows.append({
            "test": name,
            "n": entry["n"],
            "fail": entry["failures"],
            "perf": perf,
            "std%": 100 * train["std"] / perf if perf else None,
            "total": entry["total"] or None,
        })
    return pd.DataFrame(rows).set_index("test")


def format_table(summary: dict[str, dict[str, Any]]) -> str:
    df = table(summary)
    return df.to_string(
        float_format=lambda v: f"{v:,.2f}", na_rep="-", justify="right"
    )


def failure_rate(summary: dict[str, dict[str, Any]]) -> float:
    n = sum(e["n"] for e in summary.values())
    return sum(e["failures"] for e in summary.values()) / n if n else 0.0
