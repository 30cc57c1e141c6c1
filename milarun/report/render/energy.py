"""The energy blocks of a report (milarun.report.energy's numbers) as text and plain data."""

from __future__ import annotations

import math
from typing import Any

from milarun.report.build import Report
from milarun.report.render import format as fmt


def score_lines(report: Report) -> list[tuple[str, str]]:
    """The Scores block's energy lines: the perf/W score with its coverage, the power cost."""
    lines = []
    if report.energy.score is not None:
        lines.append(
            (
                "Perf/W score",
                f"{fmt.sig(report.energy.score):>12}  examples/J "
                f"(coverage {report.energy.coverage or 0:.0%}: tests with energy)",
            )
        )
    if report.energy.power_cost is not None:
        lines.append(("Power cost ($/kWh)", f"{report.energy.power_cost:12,.4g}"))
    return lines


def text_section(report: Report) -> list[str]:
    """The "Energy" block of the text report (nothing when no test has energy)."""
    if report.energy.table.empty:
        return []
    rows = {}
    for test, r in report.energy.table.iterrows():
        cells = {
            "runs": fmt.count(r["runs"]),
            "W": fmt.sig(r["watts"]),
            "J/example": fmt.sig(r["joules_per_example"]),
            "perf/W": fmt.sig(r["perf_per_watt"]),
        }
        if report.energy.power_cost is not None:
            cells["$ per 1M examples"] = fmt.num(r["cost_per_million"], ",.4f")
        # why a GPU reaches what it reaches: its clock, and how often it ran at its limit
        q = report.quality.loc[test] if test in report.quality.index else {}
        cells["SM MHz"] = fmt.num(q.get("sm_clock"), ",.0f")
        cells["at limit"] = fmt.num(100 * q.get("power_limit", math.nan), ".0f") + "%"
        cells["method"] = r["method"]
        rows[fmt.short(str(test))] = cells
    title = "Energy over the steady window (mean of runs; perf/W = examples/s per W = examples/J)"
    note = [
        "SM MHz: median SM clock over the steady window; at limit: its steady slices at the GPU's",
        "power limit (NVML's SwPowerCap, AMD SMI's PPT): the normal operating point of a GPU",
        "at full load, not a fault",
    ]
    return fmt.section(title) + [fmt.frame(rows), *note]


def add_records(data: dict[str, Any], report: Report) -> None:
    """The JSON report's energy (its ``energy`` and score keys), only where there is one."""
    if report.energy.table.empty:
        return
    data["energy"] = {
        str(t): {
            k: (v if isinstance(v, str) else float(v) if math.isfinite(v) else None)
            for k, v in row.items()
        }
        for t, row in report.energy.table.iterrows()
    }
    data["scores"].update(
        perf_per_watt_score=report.energy.score,
        perf_per_watt_coverage=report.energy.coverage,
        power_cost=report.energy.power_cost,
    )
