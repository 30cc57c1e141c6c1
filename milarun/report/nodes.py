"""Per-node comparison (`milarun report OUT --compare-nodes`): each node's score, the
node x device matrix, and the nodes or devices significantly slower than their siblings.

Numbers only; milarun.report.render.nodes formats them. A result counts on its node
(summary.result_node: ``node``, else ``slurm.node``, else ``hostname``) and its device.
Distributed results (several devices, ``train_<rank>`` timers or ``ranks``) are left out
of this comparison: they belong to several devices, often to several nodes.

- Node score: the main report's weighted geometric mean, exp(sum w ln perf / sum w), over
  the weighted tests the node has a successful rate for; perf = the mean of the node's
  steady rates (summary.run_rate). Coverage = that weight / the total weight. A node whose
  runs all failed is listed with no score. Without weights (or none for these tests) every
  test weighs 1. The score mixes raw rates, so it only compares nodes that ran the same
  tests: the ratio does not use it.
- Node ratio: the weighted geometric mean, over the tests the node has, of (its perf / the
  median over nodes of that test's perf); 1.0 is a typical node. A node that failed a test
  (say one at 1e6 examples/s) is compared on the others, not scored down for the gap.
- Matrix: for each (node, device) cell, the weighted geometric mean over tests of
  (the cell's mean rate / the median of that test's cell means): 1.0 is a typical device.
- Flags: a unit (a node, or a node/device cell) is flagged "significantly slower than its
  siblings" (the other units of its kind) when BOTH
  1. its ratio to the siblings' median (node ratio / the median of the other nodes' ratios;
     cell value / the median of the other cells' values) is below MARGIN (0.95), and
  2. a test says so: per weighted test, a one-sided Welch t-test (scipy.stats.ttest_ind,
     equal_var=False, alternative="less") of the unit's steady-window slice rates
     (steady.window of each run, pooled) against its siblings' slices; the
     per-test p-values combined over tests with Fisher's method
     (scipy.stats.combine_pvalues) are below ALPHA (0.01).
  The margin alone would flag noise; the test alone would flag a 1% gap measured precisely.
  (MARGIN, ALPHA and the test: milarun.report.significance, which the doctor uses too.)
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from milarun.report import stats
from milarun.report.about import natural_key
from milarun.report.significance import significantly_slower, slower_p
from milarun.results import read
from milarun.results.folder import Loaded


@dataclass(frozen=True)
class Flag:
    """A node (``node2``) or device (``node2/cpu:0``) significantly slower than its siblings."""

    unit: str
    ratio: float  # to the siblings' median
    p_value: float
    reason: str


@dataclass(frozen=True)
class NodeRow:
    node: str
    runs: int
    failures: int
    score: float | None  # None: no successful weighted test (e.g. every run failed)
    coverage: float | None
    ratio: float | None  # geometric mean of (mean rate / the test's median node)
    p_value: float | None = None  # the combined test against the other nodes (when tested)
    flagged: bool = False


@dataclass(frozen=True)
class Cell:
    node: str
    device: str
    runs: int
    value: float | None  # geometric mean of (mean rate / the test's median cell)
    p_value: float | None = None
    flagged: bool = False


@dataclass(frozen=True)
class NodeReport:
    nodes: tuple[NodeRow, ...]
    devices: tuple[str, ...]  # the matrix's columns, in device order
    cells: tuple[Cell, ...]
    flags: tuple[Flag, ...] = ()
    tested: bool = False  # whether the significance test ran (--compare-nodes)
    reruns: int = 0  # results of `milarun rerun`, left out of the node comparison

    def cell(self, node: str, device: str) -> Cell | None:
        return next((c for c in self.cells if c.node == node and c.device == device), None)

    def warnings(self) -> list[str]:
        """The flags, and the nodes whose runs all failed, one line each (when tested)."""
        if not self.tested:
            return []
        dead = [
            f"node {n.node}: all {n.runs} run(s) failed (no score)"
            for n in self.nodes
            if n.runs and n.failures == n.runs
        ]
        left = (
            [f"{self.reruns} rerun result(s) left out of the node comparison (not the fleet's)"]
            if self.reruns
            else []
        )
        return dead + [f.reason for f in self.flags] + left


@dataclass(frozen=True)
class _Run:
    node: str
    device: str
    test: str
    rate: float | None
    slices: tuple[float, ...]


def device_order(label: str) -> tuple[Any, ...]:
    """Sort key of a device label (``cpu:2``, ``0``, ``node2/cuda:1``): node, kind, index."""
    node, _, device = str(label).rpartition("/")
    kind, _, index = device.rpartition(":")
    found = (kind, int(index), "") if index.isdigit() else (device, -1, "")
    return (natural_key(node), *found)


def _runs(
    loaded: Iterable[read.ResultView | Mapping[str, Any]],
    nodes: dict[str, list[_Run]],
    slices: bool,
) -> list[_Run]:
    """The single-device runs, with their steady slices where ``slices`` (the significance
    tests' samples); ``nodes`` gets every result's node, in order (a node whose runs were
    all distributed still has its row)."""
    out = []
    for view in read.views(loaded):
        nodes.setdefault(view.node, [])
        if view.distributed:
            continue
        rate = view.rate()
        window = view.steady_window() if rate is not None and slices else ()
        out.append(_Run(view.node, view.device, view.name, rate, window))
    return out


def _geomean_or_none(values: dict[str, float], weights: dict[str, float]) -> float | None:
    """The main report's weighted geometric mean (weights here are all positive)."""

    return stats.weighted_geomean(values, weights) if values else None


def _means(runs: list[_Run], weights: dict[str, float]) -> dict[str, float]:
    """Per weighted test, the mean of these runs' steady rates."""
    rates: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        if run.rate is not None and run.test in weights:
            rates[run.test].append(run.rate)
    return {t: math.fsum(v) / len(v) for t, v in rates.items()}


def _relative(
    means: dict[Any, dict[str, float]], weights: dict[str, float]
) -> dict[Any, float | None]:
    """Per unit (node or cell), the weighted geometric mean over the tests it has of (its
    mean rate / the median of that test's unit means): 1.0 is a typical unit."""
    per_test: dict[str, list[float]] = defaultdict(list)
    for found in means.values():
        for t, v in found.items():
            per_test[t].append(v)
    medians = {t: statistics.median(v) for t, v in per_test.items()}
    return {
        key: _geomean_or_none({t: v / medians[t] for t, v in found.items()}, weights)
        for key, found in means.items()
    }


def _samples(
    runs: list[_Run], weights: dict[str, float], unit: Callable[[_Run], str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per weighted test: every steady-window slice of the runs, and its unit's name."""
    values: dict[str, list[float]] = defaultdict(list)
    owners: dict[str, list[str]] = defaultdict(list)
    for run in runs:
        if run.slices and run.test in weights:
            values[run.test] += run.slices
            owners[run.test] += [unit(run)] * len(run.slices)
    return {t: (np.asarray(values[t], dtype=float), np.asarray(owners[t])) for t in values}


def _sibling_ratio(value: float | None, others: list[float | None]) -> float | None:
    known = [v for v in others if v is not None]
    if value is None or not known:
        return None
    return value / statistics.median(known)


def _judge(
    unit: str,
    kind: str,
    value: float | None,
    others: list[float | None],
    samples: dict[str, tuple[np.ndarray, np.ndarray]],
) -> tuple[float | None, Flag | None]:
    """The unit's combined p-value, and its flag when both the margin and the test say so."""
    p, tests = slower_p(
        [(values[owners == unit], values[owners != unit]) for values, owners in samples.values()]
    )
    ratio = _sibling_ratio(value, others)
    if p is None or ratio is None or not significantly_slower(ratio, p):
        return p, None
    return p, Flag(
        unit,
        ratio,
        p,
        (
            f"{kind} {unit} is significantly slower than the other {kind}s: {ratio:.2f}x their "
            f"median (one-sided Welch tests over {tests} test(s), Fisher p={p:.2g})"
        ),
    )


def compare_nodes(
    loaded: Sequence[read.ResultView | Mapping[str, Any]],
    weights: dict[str, float] | None = None,
    *,
    test: bool = False,
) -> NodeReport:
    """The per-node section of these results; ``test``: run the significance test and flag."""
    by_node: dict[str, list[_Run]] = {}
    runs = _runs(loaded, by_node, slices=test)
    weights = {t: w for t, w in (weights or {}).items() if w > 0}
    if not any(r.test in weights for r in runs):  # no weights, or none for these tests
        weights = {r.test: 1.0 for r in runs}
    total = sum(weights.values())
    for run in runs:
        by_node[run.node].append(run)
    names = sorted(by_node, key=natural_key)
    means = {node: _means(by_node[node], weights) for node in names}
    ratios = _relative(means, weights)  # not the scores: nodes may lack different tests
    flags: list[Flag] = []
    rows = []
    samples = _samples(runs, weights, lambda r: r.node) if test else {}
    for node in names:
        p, flag = (
            _judge(node, "node", ratios[node], [ratios[n] for n in names if n != node], samples)
            if test
            else (None, None)
        )
        flags += [flag] if flag else []
        rows.append(
            NodeRow(
                node,
                len(by_node[node]),
                sum(r.rate is None for r in by_node[node]),
                _geomean_or_none(means[node], weights),
                sum(weights[t] for t in means[node]) / total if total else None,
                ratios[node],
                p,
                flag is not None,
            )
        )
    cells, devices = _matrix(runs, weights, test, flags)
    return NodeReport(tuple(rows), devices, cells, tuple(flags), test)


def _matrix(
    runs: list[_Run], weights: dict[str, float], test: bool, flags: list[Flag]
) -> tuple[tuple[Cell, ...], tuple[str, ...]]:
    """The node x device cells (flags of slow cells are added to ``flags``)."""
    by_cell: dict[tuple[str, str], list[_Run]] = defaultdict(list)
    for run in runs:
        by_cell[(run.node, run.device)].append(run)
    values = _relative({key: _means(items, weights) for key, items in by_cell.items()}, weights)
    keys = sorted(by_cell, key=lambda k: (natural_key(k[0]), device_order(k[1])))
    cells = []
    samples = _samples(runs, weights, lambda r: f"{r.node}/{r.device}") if test else {}
    for key in keys:
        p, flag = (
            _judge(
                "/".join(key),
                "device",
                values[key],
                [v for k, v in values.items() if k != key],
                samples,
            )
            if test
            else (None, None)
        )
        flags += [flag] if flag else []
        cells.append(Cell(key[0], key[1], len(by_cell[key]), values[key], p, flag is not None))
    devices = tuple(sorted({k[1] for k in keys}, key=device_order))
    return tuple(cells), devices


def section(
    weights: dict[str, float] | None, loaded: Loaded | None, *, test: bool = False
) -> NodeReport | None:
    """The per-node section of a report: with ``test`` (--compare-nodes) always, with its
    flags; otherwise only when the results span more than one node. The weights are the
    report's (Report.test_weights), else every test weighs 1."""
    if loaded is None:
        return None
    # a rerun (of one node's result, on whatever host ran it) is no node of the fleet
    fleet = [view for view in loaded.results if not view.rerun_of]
    if not fleet or not (test or read.spans_nodes(fleet)):
        return None
    found = compare_nodes(fleet, weights, test=test)
    reruns = len(loaded.results) - len(fleet)
    return replace(found, reruns=reruns) if reruns else found
