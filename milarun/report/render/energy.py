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
    if report.energy.node_score is not None:
        lines.append(
            (
                "Node perf/W score",
                f"{fmt.sig(report.energy.node_score):>12}  examples/J at the node's plug "
                f"(coverage {report.energy.node_coverage or 0:.0%}: tests with node energy)",
            )
        )
    if report.energy.power_cost is not None:
        lines.append(("Power cost ($/kWh)", f"{report.energy.power_cost:12,.4g}"))
    return lines


NODE_NOTE = [
    "node W: the whole node from its BMC; share W: this test's part of it (the node divided",
    "by the instances that shared it); GPU %: the GPUs' part of the share; rest W: the rest",
    "of the node (CPUs, memory, fans, NICs) in the share; node perf/W: examples/J at the plug",
]


def node_section(report: Report) -> list[str]:
    """The "Node energy" block: the BMC's figures per test, and why a test has none."""
    table, notes = report.energy.node_table, list(report.energy.node_notes)
    if (table is None or table.empty) and not notes:
        return []
    out = fmt.section("Node energy over the steady window (BMC: Redfish or IPMI; mean of runs)")
    if table is not None and not table.empty:
        rows = {
            fmt.short(str(test)): {
                "runs": fmt.count(r["runs"]),
                "node W": fmt.sig(r["node_watts"]),
                "share W": fmt.sig(r["share_watts"]),
                "GPU %": fmt.num(100 * r["gpu_share"], ".0f"),
                "rest W": fmt.sig(r["rest_watts"]),
                "node perf/W": fmt.sig(r["node_perf_per_watt"]),
                "method": r["method"],
            }
            for test, r in table.iterrows()
        }
        out += [fmt.frame(rows), *NODE_NOTE]
    return out + notes


def text_section(report: Report) -> list[str]:
    """The "Energy" block of the text report (nothing when no test has energy), then the
    node's energy where a BMC measured it."""
    if report.energy.table.empty:
        return node_section(report)
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
    return fmt.section(title) + [fmt.frame(rows), *note] + node_section(report)


def add_records(data: dict[str, Any], report: Report) -> None:
    """The JSON report's energy (its ``energy`` and score keys), only where there is one;
    the node's (``node_energy``, its score and notes) likewise."""
    nodes = report.energy.node_table
    if nodes is not None and not nodes.empty:
        data["node_energy"] = {str(t): _plain(row) for t, row in nodes.iterrows()}
        data["scores"].update(
            node_perf_per_watt_score=report.energy.node_score,
            node_perf_per_watt_coverage=report.energy.node_coverage,
        )
    if report.energy.node_notes:
        data["node_energy_notes"] = list(report.energy.node_notes)
    if report.energy.table.empty:
        return
    data["energy"] = {str(t): _plain(row) for t, row in report.energy.table.iterrows()}
    data["scores"].update(
        perf_per_watt_score=report.energy.score,
        perf_per_watt_coverage=report.energy.coverage,
        power_cost=report.energy.power_cost,
    )


def _plain(row: Any) -> dict[str, Any]:
    """A table row as JSON values (NaN: null)."""
    return {
        str(k): (v if isinstance(v, str) else float(v) if math.isfinite(v) else None)
        for k, v in row.items()
    }
