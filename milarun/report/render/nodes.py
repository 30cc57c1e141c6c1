"""The per-node section of a report (milarun.report.nodes) as text, plain data and CSV; the
HTML page renders the same records in templates/report.html.j2."""

from __future__ import annotations

import dataclasses
import io
import textwrap
from collections import Counter
from typing import TYPE_CHECKING, Any

from milarun.report.nodes import NodeReport
from milarun.report.render import format as fmt
from milarun.report.significance import ALPHA, MARGIN

if TYPE_CHECKING:
    from milarun.report.build import Report

NODES_TITLE = (
    "Per node (score: weighted geometric mean of its mean rates; ratio: the same, "
    "of rate / test median)"
)
MATRIX_TITLE = "Node x device (geometric mean of rate / the test's median device; 1.00 = typical)"


def flag_text(flagged: bool, p_value: float | None) -> str:
    if p_value is None:
        return "-"
    return f"{'SLOWER' if flagged else 'ok'} ({fmt.p_text(p_value)})"


def cell_text(nodes: NodeReport, node: str, device: str) -> str:
    cell = nodes.cell(node, device)
    if cell is None or cell.value is None:
        return "-"
    return f"{cell.value:.2f}" + ("*" if cell.flagged else "")


def labels(names: list[str]) -> dict[str, str]:
    """Each node's row label in text: cut in the middle when long (fmt.short), but
    whole where two cut labels would be the same (and all whole if still not unique)."""
    short = {name: fmt.short(name) for name in names}
    counts = Counter(short.values())
    out = {name: label if counts[label] == 1 else name for name, label in short.items()}
    return out if len(set(out.values())) == len(out) else {name: name for name in names}


def text_section(report: Report) -> list[str]:
    """The "Per node" and "Node x device" blocks (nothing without a per-node section)."""
    nodes = report.nodes
    if nodes is None:
        return []
    label = labels([row.node for row in nodes.nodes])
    rows = {}
    for row in nodes.nodes:
        cells = {
            "runs": str(row.runs),
            "fail": str(row.failures),
            "score": fmt.num(row.score),
            "coverage": fmt.num(row.coverage, ".0%"),
            "ratio to median": fmt.num(row.ratio, ".3f"),
        }
        if nodes.tested:
            cells["flag"] = flag_text(row.flagged, row.p_value)
        rows[label[row.node]] = cells
    out = fmt.section(NODES_TITLE) + [fmt.frame(rows, "node")]
    if nodes.cells:
        matrix = {
            label[row.node]: {d: cell_text(nodes, row.node, d) for d in nodes.devices}
            for row in nodes.nodes
        }
        out += fmt.section(MATRIX_TITLE) + [fmt.frame(matrix, "node")]
        if nodes.tested:
            out.append(
                textwrap.fill(
                    f"* significantly slower than its siblings ({explain()})",
                    fmt.WIDTH,
                    subsequent_indent="  ",
                )
            )
    return out


def explain() -> str:
    return (
        f"below {MARGIN:.2f}x their median and p < {ALPHA:g}: one-sided Welch tests of "
        "the steady-window slices, combined over tests with Fisher's method"
    )


def records(nodes: NodeReport | None) -> dict[str, Any] | None:
    """The per-node section as plain data (the JSON output)."""
    if nodes is None:
        return None
    return {
        "tested": nodes.tested,
        "nodes": {
            r.node: {k: v for k, v in dataclasses.asdict(r).items() if k != "node"}
            for r in nodes.nodes
        },
        "devices": list(nodes.devices),
        "matrix": {
            r.node: {
                c.device: {
                    "runs": c.runs,
                    "value": c.value,
                    "p_value": c.p_value,
                    "flagged": c.flagged,
                }
                for c in nodes.cells
                if c.node == r.node
            }
            for r in nodes.nodes
        },
        "flags": [dataclasses.asdict(f) for f in nodes.flags],
    }


def csv_blocks(nodes: NodeReport | None) -> str:
    """With --compare-nodes, after the per-test table and a blank line each: the per-node
    table, then the node x device matrix (as many rows as nodes)."""
    if nodes is None or not nodes.tested:
        return ""
    import pandas as pd

    buf = io.StringIO()
    buf.write("\n")
    pd.DataFrame([dataclasses.asdict(r) for r in nodes.nodes]).set_index("node").to_csv(
        buf, float_format="%.10g"
    )
    buf.write("\n")
    matrix = {
        r.node: {d: getattr(nodes.cell(r.node, d), "value", None) for d in nodes.devices}
        for r in nodes.nodes
    }
    df = pd.DataFrame.from_dict(matrix, orient="index", columns=list(nodes.devices))
    df.index.name = "node"
    df.to_csv(buf, float_format="%.10g")
    return buf.getvalue()
