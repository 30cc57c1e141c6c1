"""The report's node energy (from the BMC, milarun.measure.nodepower): per test the node's
power, the share of it the GPUs drew, the rest of the node, and examples per joule at node
level; a node perf/W score; and, where a BMC was asked but gave no figure, why. From the
summary's ``node_energy``; a report of runs without a BMC gets nothing from here."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from milarun import results
from milarun.report import stats
from milarun.report.summary_entry import entries
from milarun.results import read
from milarun.results.records import NodeEnergy

if TYPE_CHECKING:
    import pandas as pd

COLUMN = "node_perf_per_watt"
COLUMNS = ("runs", "node_watts", "share_watts", "gpu_share", "rest_watts", COLUMN, "method")
NUMBERS = ("node_watts", "share_watts", "gpu_share", "rest_watts", "examples_per_joule")
MAX_NOTES = 3  # distinct reasons kept per test


def _positive(value: Any) -> bool:
    return results.is_finite(value) and value > 0


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def measured(node: NodeEnergy | None) -> bool:
    """Whether a result's ``node_energy`` holds a node figure (examples per joule over a
    steady window), not only the reason its BMC gave none."""
    return node is not None and _positive(node.examples_per_joule) and _positive(node.seconds)


def summary_entry(views: list[read.ResultView]) -> dict[str, Any]:
    """A test's ``node_energy``: the mean over its runs that have a node figure, and the
    reasons of those that asked their BMC and got none; nothing where no run had a BMC."""
    found_in, reasons = [], Counter[str]()
    for view in views:
        node = view.node_energy
        if node is None:
            continue
        if measured(node):
            found_in.append(node)
        elif node.reason is not None:
            reasons[node.reason[:300]] += 1
    if not found_in and not reasons:
        return {}
    found: dict[str, Any] = {"n": len(found_in)}
    per_run: dict[str, list[float]] = {k: [] for k in NUMBERS}
    for node in found_in:
        seconds = float(node.seconds or 0)
        share, gpu = node.share_joules, node.gpu_joules
        if _positive(node.watts):
            per_run["node_watts"].append(float(node.watts or 0))
        if share is not None and share > 0:
            per_run["share_watts"].append(share / seconds)
            if gpu is not None and gpu >= 0:
                per_run["gpu_share"].append(gpu / share)
                per_run["rest_watts"].append((share - gpu) / seconds)
        per_run["examples_per_joule"].append(float(node.examples_per_joule or 0))
    found.update({k: _mean(v) for k, v in per_run.items()})
    found["method"] = ",".join(sorted({str(n.method) for n in found_in})) or None
    if reasons:
        found["notes"] = [
            f"{why} ({n} run{'s' * (n > 1)})" for why, n in reasons.most_common(MAX_NOTES)
        ]
    return {"node_energy": found}


def entry_problem(entry: Mapping[str, Any]) -> str | None:
    """The types of a summary entry's ``node_energy`` (a hand-edited file)."""
    node = entry.get("node_energy")
    if node is None:
        return None
    if not isinstance(node, dict):
        return "'node_energy' is not an object"
    for key in NUMBERS:
        value = node.get(key)
        if value is not None and not (results.is_finite(value) and value >= 0):
            return f"'node_energy.{key}' is {value!r}, not a number >= 0"
    notes = node.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        return "'node_energy.notes' is not a list of strings"
    return None


def node_table(summary: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Per test with a node figure: runs, the node's W, this test's share of it, the GPUs'
    fraction of the share, the rest of the node's W, node examples/J, method."""
    import pandas as pd

    rows = {}
    for test, entry in entries(summary).items():
        node = entry.node_energy
        if node is None or not _positive(node.get("examples_per_joule")):
            continue
        rows[test] = {
            "runs": node.get("n"),
            "node_watts": node.get("node_watts"),
            "share_watts": node.get("share_watts"),
            "gpu_share": node.get("gpu_share"),
            "rest_watts": node.get("rest_watts"),
            COLUMN: node["examples_per_joule"],
            "method": str(node.get("method") or "-"),
        }
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame.from_dict(rows, orient="index", columns=list(COLUMNS)).sort_index()
    return df.astype({c: float for c in COLUMNS if c != "method"})


def node_notes(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per test and reason where a BMC was asked but gave no node figure."""
    out = []
    for test, entry in sorted(entries(summary).items()):
        node = entry.node_energy
        for note in node.get("notes", []) if node is not None else []:
            out.append(f"{test}: no node energy: {note}")
    return out


def node_score(
    table: pd.DataFrame, weights: Mapping[str, float] | None
) -> tuple[float | None, float | None]:
    """The weighted geometric mean of node perf/W and its coverage (as the perf/W score)."""
    weighted = [t for t, w in (weights or {}).items() if w > 0]
    if table.empty or not weights or not weighted:
        return None, None
    values = {t: float(table.loc[t, COLUMN]) for t in weighted if t in table.index}
    values = {t: v for t, v in values.items() if v > 0}
    total = sum(weights[t] for t in weighted)
    if not values or not total:
        return None, None
    return stats.weighted_geomean(values, dict(weights)), sum(weights[t] for t in values) / total
