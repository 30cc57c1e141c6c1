"""The report's energy part: perf per watt per test and for the suite, the energy cost of a
million examples, and the throttling warnings (from the summary's ``energy`` and
``throttle``, see milarun.measure.energy). A report whose tests have no energy (CPU runs) gets
nothing from here: no column, no section, no score line.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from milarun import results
from milarun.report import nodeenergy, stats
from milarun.report.summary_entry import entries
from milarun.results import read
from milarun.results.throttle import POWER_LIMIT, REASON_TEXT

if TYPE_CHECKING:
    import pandas as pd


COLUMN = "perf_per_watt"  # examples/s per W = examples/J, in the per-test table
JOULES_PER_KWH = 3.6e6
PER = 1e6  # the energy cost is given per million examples
COLUMNS = ("runs", "watts", "joules_per_example", "perf_per_watt", "cost_per_million", "method")


def energy_table(summary: dict[str, dict[str, Any]], power_cost: float | None) -> pd.DataFrame:
    """Per test with energy: runs measured, mean W, J/example, examples/J and, with a power
    cost ($/kWh), the cost of a million examples: J/example x 1e6 / 3.6e6 x $/kWh."""
    import pandas as pd  # the summary side needs no pandas

    rows = {}
    for test, entry in entries(summary).items():
        found = entry.energy
        if found is None or not found.get("examples_per_joule"):
            continue
        per_example = found.get("joules_per_example")
        rows[test] = {
            "runs": found.get("n"),
            "watts": found.get("watts"),
            "joules_per_example": per_example,
            "perf_per_watt": found["examples_per_joule"],
            "cost_per_million": (
                per_example * PER / JOULES_PER_KWH * power_cost
                if power_cost is not None and per_example
                else None
            ),
            "method": str(found.get("method") or "-"),
        }
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame.from_dict(rows, orient="index", columns=list(COLUMNS)).sort_index()
    return df.astype({c: float for c in COLUMNS if c != "method"})


@dataclass(frozen=True)
class EnergySection:
    """What a report shows of energy: the per-test table, the perf/W score and its
    coverage, the power cost it was priced at, and the throttling warnings."""

    table: pd.DataFrame
    score: float | None = None
    coverage: float | None = None
    power_cost: float | None = None
    warnings: tuple[str, ...] = ()
    # the node's energy from its BMC (report.nodeenergy): empty where no run had a BMC
    node_table: pd.DataFrame | None = None
    node_score: float | None = None
    node_coverage: float | None = None
    node_notes: tuple[str, ...] = ()


def energy_section(
    summary: dict[str, dict[str, Any]], weights: dict[str, float] | None, power_cost: float | None
) -> EnergySection:
    """The energy table, perf/W score and throttling warnings of a summary, and the node's
    energy where a BMC measured it."""
    warnings = throttle_warnings(summary)
    table = energy_table(summary, power_cost)
    nodes = nodeenergy.node_table(summary)
    node_score, node_coverage = nodeenergy.node_score(nodes, weights)
    node = {
        "node_table": nodes,
        "node_score": node_score,
        "node_coverage": node_coverage,
        "node_notes": tuple(nodeenergy.node_notes(summary)),
    }
    if table.empty:
        if power_cost is not None:
            warnings.append(
                "--power-cost: no test has an energy measurement (GPU runs only), "
                "so no energy cost is shown"
            )
        return EnergySection(table, warnings=tuple(warnings), **node)
    score = coverage = None
    weighted = [t for t, w in (weights or {}).items() if w > 0]
    values = {
        t: float(table.loc[t, COLUMN])
        for t in weighted
        if t in table.index and table.loc[t, COLUMN] > 0
    }
    total = sum(weights[t] for t in weighted) if weights else 0
    if weights and values and total:
        score = stats.weighted_geomean(values, weights)
        coverage = sum(weights[t] for t in values) / total
    return EnergySection(table, score, coverage, power_cost, tuple(warnings), **node)


def throttle_warnings(summary: dict[str, dict[str, Any]]) -> list[str]:
    """One line per test, GPU and reason whose steady windows ran throttled."""
    out = []
    for test, entry in sorted(entries(summary).items()):
        for gpu, found in sorted((entry.throttle or {}).items()):
            window = found["window_slices"]
            for name, slices in found["reasons"].items():
                if name == POWER_LIMIT:
                    continue  # the operating point, shown beside the FLOP/s, not a warning
                what = REASON_TEXT.get(name, name)
                out.append(f"{test}: {gpu} {what} ({name}) in {slices} of {window} steady slices")
    return out


ENERGY_KEYS = ("watts", "joules_per_example", "examples_per_joule")


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def summary_entries(views: list[read.ResultView]) -> dict[str, Any]:
    """A test's ``energy`` (mean of the successful runs that measured it) and ``throttle``
    (per GPU: its runs' window slices, and the slices throttled per reason); each only
    where there is something to say."""
    out: dict[str, Any] = {}
    measured = [
        e
        for v in views
        if (e := v.energy) is not None
        and _is_positive_number(e.joules_per_example)
        and _is_positive_number(e.examples_per_joule)
    ]
    if measured:
        out["energy"] = {
            "n": len(measured),
            **{
                k: _mean(
                    [float(getattr(e, k)) for e in measured if results.is_finite(getattr(e, k))]
                )
                for k in ENERGY_KEYS
            },
            "method": ",".join(sorted({str(e.method) for e in measured})),
        }
    windows: Counter[str] = Counter()
    reasons: dict[str, Counter[str]] = defaultdict(Counter)
    for view in views:
        throttle = view.diagnostics().throttle
        if not isinstance(throttle, dict) or not isinstance(throttle.get("gpus"), dict):
            continue
        for gpu, found in throttle["gpus"].items():
            named = found.get("reasons") if isinstance(found, dict) else None
            if _count(throttle.get("window_slices")) and isinstance(named, dict):
                windows[gpu] += throttle["window_slices"]
                for name, n in named.items():
                    reasons[gpu][str(name)] += n if _count(n) else 0
    throttled = {
        gpu: {"window_slices": windows[gpu], "reasons": dict(sorted(c.items()))}
        for gpu, c in sorted(reasons.items())
        if sum(c.values())
    }
    if throttled:
        out["throttle"] = throttled
    out.update(nodeenergy.summary_entry(views))
    return out


def _is_positive_number(value: Any) -> bool:
    return results.is_finite(value) and value > 0


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def entry_problem(entry: Mapping[str, Any]) -> str | None:
    """The types of a summary entry's ``energy`` and ``throttle`` (a hand-edited file)."""
    energy = entry.get("energy") or {}
    for key in ENERGY_KEYS:
        if energy.get(key) is not None and not _is_positive_number(energy[key]):
            return f"'energy.{key}' is {energy[key]!r}, not a positive number"
    for gpu, found in (entry.get("throttle") or {}).items():
        if (
            not isinstance(found, dict)
            or not _count(found.get("window_slices"))
            or not isinstance(found.get("reasons"), dict)
            or not all(_count(n) for n in found["reasons"].values())
        ):
            return f"'throttle.{gpu}' is not {{window_slices, reasons: {{name: count}}}}"
    return nodeenergy.entry_problem(entry)
