"""The report's energy part: perf per watt per test and for the suite, the energy cost of a
million examples, and the throttling warnings (from the summary's ``energy`` and
``throttle``, see milarun.energy). A report whose tests have no energy (CPU runs) gets
nothing from here: no column, no section, no score line.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from milarun.energy import REASON_TEXT

if TYPE_CHECKING:
    import pandas as pd

    from milarun.report import Report

COLUMN = "perf_per_watt"  # examples/s per W = examples/J, in the per-test table
JOULES_PER_KWH = 3.6e6
PER = 1e6  # the energy cost is given per million examples
COLUMNS = ("runs", "watts", "joules_per_example", "perf_per_watt", "cost_per_million",
           "method")


def energy_table(summary: dict[str, dict[str, Any]], power_cost: float | None
                 ) -> pd.DataFrame:
    """Per test with energy: runs measured, mean W, J/example, examples/J and, with a power
    cost ($/kWh), the cost of a million examples: J/example x 1e6 / 3.6e6 x $/kWh."""
    import pandas as pd  # the summary side needs no pandas

    rows = {}
    for test, entry in summary.items():
        found = entry.get("energy") if isinstance(entry, dict) else None
        if not isinstance(found, dict) or not found.get("examples_per_joule"):
            continue
        per_example = found.get("joules_per_example")
        rows[test] = {
            "runs": found.get("n"), "watts": found.get("watts"),
            "joules_per_example": per_example, "perf_per_watt": found["examples_per_joule"],
            "cost_per_million": (per_example * PER / JOULES_PER_KWH * power_cost
                                 if power_cost is not None and per_example else None),
            "method": str(found.get("method") or "-"),
        }
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame.from_dict(rows, orient="index", columns=list(COLUMNS)).sort_index()
    return df.astype({c: float for c in COLUMNS if c != "method"})


def add_energy(report: Report, summary: dict[str, dict[str, Any]],
               weights: dict[str, float] | None, power_cost: float | None) -> None:
    """Energy table, perf/W column and score, and throttling warnings, into ``report``."""
    from milarun.report import _weighted_score  # report imports this module

    report.warnings += throttle_warnings(summary)
    report.energy = energy_table(summary, power_cost)
    if report.energy.empty:
        if power_cost is not None:
            report.warnings.append("--power-cost: no test has an energy measurement (GPU "
                                   "runs only), so no energy cost is shown")
        return
    report.power_cost = power_cost
    if not report.table.empty:
        report.table[COLUMN] = report.energy[COLUMN].reindex(report.table.index)
    if not weights:
        return
    weighted = [t for t, w in weights.items() if w > 0]
    values = {t: float(report.energy.loc[t, COLUMN]) for t in weighted
              if t in report.energy.index and report.energy.loc[t, COLUMN] > 0}
    total = sum(weights[t] for t in weighted)
    if values and total:
        report.energy_score = _weighted_score(values, weights)
        report.energy_coverage = sum(weights[t] for t in values) / total


def throttle_warnings(summary: dict[str, dict[str, Any]]) -> list[str]:
    """One line per test, GPU and reason whose steady windows ran throttled."""
    out = []
    for test, entry in sorted(summary.items()):
        for gpu, found in sorted((entry.get("throttle") or {}).items()):
            window = found["window_slices"]
            for name, slices in found["reasons"].items():
                what = REASON_TEXT.get(name, name)
                out.append(f"{test}: {gpu} {what} ({name}) in {slices} of {window} steady "
                           "slices")
    return out


def sig(value: Any, digits: int = 3) -> str:
    """A number to ``digits`` significant digits, with thousands separators when large."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 10 ** digits else f"{value:.{digits}g}"


def score_lines(report: Report) -> list[tuple[str, str]]:
    """The Scores block's energy lines: the perf/W score with its coverage, the power cost."""
    lines = []
    if report.energy_score is not None:
        lines.append(("Perf/W score", f"{sig(report.energy_score):>12}  examples/J "
                      f"(coverage {report.energy_coverage or 0:.0%}: tests with energy)"))
    if report.power_cost is not None:
        lines.append(("Power cost ($/kWh)", f"{report.power_cost:12,.4g}"))
    return lines


def text_section(report: Report) -> list[str]:
    """The "Energy" block of the text report (nothing when no test has energy)."""
    if report.energy.empty:
        return []
    from milarun import render  # here: render imports this module

    rows = {}
    for test, r in report.energy.iterrows():
        cells = {"runs": render.count(r["runs"]), "W": sig(r["watts"]),
                 "J/example": sig(r["joules_per_example"]),
                 "perf/W": sig(r["perf_per_watt"])}
        if report.power_cost is not None:
            cells["$ per 1M examples"] = render._num(r["cost_per_million"], ",.4f")
        cells["method"] = r["method"]
        rows[render._short(str(test))] = cells
    title = ("Energy over the steady window (mean of runs; perf/W = examples/s per W = "
             "examples/J)")
    return render.section(title) + [render._frame(rows)]


def add_records(data: dict[str, Any], report: Report) -> None:
    """The JSON report's energy (its ``energy`` and score keys), only where there is one."""
    if report.energy.empty:
        return
    data["energy"] = {str(t): {k: (v if isinstance(v, str) else
                                   float(v) if math.isfinite(v) else None)
                               for k, v in row.items()}
                      for t, row in report.energy.iterrows()}
    data["scores"].update(perf_per_watt_score=report.energy_score,
                          perf_per_watt_coverage=report.energy_coverage,
                          power_cost=report.power_cost)
