"""The report's inference part: per inference test (llm-serve, llm-decode, vllm-offline), the
engine it ran, its latency percentiles, goodput, model-bandwidth utilisation and joules per
output token, from the summary's ``inference`` entry (mean of the successful runs).

A report with no inference test gets nothing from here: no section, no JSON key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from milarun.report.summary_entry import entries
from milarun.results import read
from milarun.results.inference import SERVE_FIGURES

if TYPE_CHECKING:
    import pandas as pd

FIGURES = (*SERVE_FIGURES, "tpot_ms", "mbu_percent")
COLUMNS = ("engine", *FIGURES, "joules_per_token")


def summary_entry(runs: list[read.ResultView]) -> dict[str, Any] | None:
    """A test's ``inference`` entry: its engine in words (the runs of one summary entry
    share their key: milarun.report.variants) and each figure's mean over the successful
    runs that have it; None for a test that is no inference test."""
    found = [i for v in runs if (i := v.inference) is not None]
    if not found:
        return None
    entry: dict[str, Any] = {"engine": found[0].describe(), "n": len(found)}
    for name in FIGURES:
        values = [i.figures[name] for i in found if name in i.figures]
        if values:
            entry[name] = sum(values) / len(values)
    return entry


def inference_table(summary: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per inference test; J/token is the energy section's J/example (an example of
    an inference test is one output token)."""
    import pandas as pd

    rows = {}
    for test, entry in entries(summary).items():
        found, energy = entry.inference, entry.energy
        if found is None:
            continue
        row = {name: found.get(name) for name in FIGURES}
        row["engine"] = str(found.get("engine") or "-")
        row["joules_per_token"] = energy.get("joules_per_example") if energy is not None else None
        rows[test] = row
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame.from_dict(rows, orient="index", columns=list(COLUMNS)).sort_index()
    return df.astype({c: float for c in COLUMNS if c != "engine"})
