"""`milarun slurm doctor`'s per-node table: each node's own verdict, and the node compared with
the others by the statistics of `report --compare-nodes` (milarun.report.nodes).

For each measurement (gemm_bf16, cpu_gemm, h2d, ...), a node's samples are those of all its
devices. Its ratio is the geometric mean over measurements of (its mean / the median of the
nodes' means), divided by the median of the other nodes' ratios; its p-value Fisher's
combination of one-sided Welch tests of its samples against the other nodes' (one per
measurement: milarun.report.significance.slower_p). A node is flagged when both say so (ratio
under MARGIN, p under ALPHA: significance.significantly_slower): FAIL under
verdicts.SIBLING_FAIL of the others, else WARN. No torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from milarun.doctor.active.verdicts import SIBLING_FAIL
from milarun.doctor.check import FAIL, PASS, WARN, worst
from milarun.report import stats
from milarun.report.about import natural_key
from milarun.report.significance import significantly_slower, slower_p


@dataclass(frozen=True)
class NodeLine:
    node: str
    verdict: str  # the node's own record: PASS, WARN, FAIL; FAIL when it wrote none
    fails: int
    warns: int
    ratio: float | None  # to the other nodes (None: alone, or nothing measured)
    p_value: float | None
    flag: str  # PASS, or WARN/FAIL when significantly slower than the other nodes
    seconds: float | None
    note: str = ""  # why a node has no record; the worst checks

    @property
    def status(self) -> str:
        return worst([self.verdict, self.flag])


def _pooled(record: dict[str, Any]) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for metrics in record.get("measurements", {}).values():
        for name, m in metrics.items():
            found.setdefault(name, []).extend(float(x) for x in m["samples"])
    return found


def compare(records: dict[str, dict[str, Any] | None], missing: dict[str, str]) -> list[NodeLine]:
    """One line per node: ``records`` by node (None: no readable record, ``missing`` says
    why)."""
    pooled = {node: _pooled(r) for node, r in records.items() if r is not None}
    means: dict[str, dict[str, float]] = {
        node: {k: math.fsum(s) / len(s) for k, s in found.items() if s}
        for node, found in pooled.items()
    }
    medians = {
        k: statistics.median(m[k] for m in means.values() if k in m)
        for k in {k for m in means.values() for k in m}
    }
    relative = {
        node: stats.weighted_geomean(
            {k: x / medians[k] for k, x in m.items() if medians[k] > 0},
            {k: 1.0 for k in m if medians[k] > 0},
        )
        if any(medians[k] > 0 for k in m)
        else None
        for node, m in means.items()
    }
    lines = []
    for node in sorted(records, key=natural_key):
        record = records[node]
        if record is None:
            lines.append(NodeLine(node, FAIL, 0, 0, None, None, PASS, None, missing.get(node, "")))
            continue
        ratio, p = _against_others(node, relative, pooled)
        flag = PASS
        if ratio is not None and p is not None and significantly_slower(ratio, p):
            flag = FAIL if ratio < SIBLING_FAIL else WARN
        bad = [c for c in record["checks"] if c["status"] in (FAIL, WARN)]
        bad.sort(key=lambda c: c["status"] != FAIL)
        lines.append(
            NodeLine(
                node,
                record["verdict"],
                sum(c["status"] == FAIL for c in record["checks"]),
                sum(c["status"] == WARN for c in record["checks"]),
                ratio,
                p,
                flag,
                record.get("seconds"),
                "; ".join(f"{c['status']} {c['name']}" for c in bad[:3]),
            )
        )
    return lines


def _against_others(
    node: str, relative: dict[str, float | None], pooled: dict[str, dict[str, list[float]]]
) -> tuple[float | None, float | None]:
    others = [r for n, r in relative.items() if n != node and r is not None]
    mine = relative.get(node)
    if mine is None or not others:
        return None, None
    pairs = []
    for name, samples in pooled[node].items():
        rest = [x for n, found in pooled.items() if n != node for x in found.get(name, [])]
        pairs.append((np.asarray(samples, dtype=float), np.asarray(rest, dtype=float)))
    p, _ = slower_p(pairs)
    return mine / statistics.median(others), p


def table(lines: list[NodeLine]) -> list[str]:
    """The per-node table, text."""
    width = max([len("node"), *(len(line.node) for line in lines)])
    out = [f"{'node':<{width}}  status  fail  warn  vs nodes  p       seconds  worst checks"]
    for line in lines:
        ratio = f"{line.ratio:.2f}x" if line.ratio is not None else "-"
        p = f"{line.p_value:.2g}" if line.p_value is not None else "-"
        seconds = f"{line.seconds:.0f}" if line.seconds is not None else "-"
        out.append(
            f"{line.node:<{width}}  {line.status:<6}  {line.fails:>4}  {line.warns:>4}  "
            f"{ratio:>8}  {p:<6}  {seconds:>7}  {line.note}"
        )
    return out


def flags(lines: list[NodeLine]) -> list[str]:
    """One sentence per node significantly slower than the others, or without a record."""
    said = []
    for line in lines:
        if line.flag != PASS and line.ratio is not None:
            said.append(
                f"node {line.node} is significantly slower than the other nodes: "
                f"{line.ratio:.2f}x their median (one-sided Welch tests, Fisher "
                f"p={line.p_value:.2g})"
            )
    return said
