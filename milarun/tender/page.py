"""The ranking page's parts that the text has not: each bid's machine and verify status, the
per-test breakdown and the chart (matplotlib, inline SVG as the report draws). Formatting
only: every figure comes from the Ranking (milarun.tender.ranking)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib
from markupsafe import Markup
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from milarun.report.render import charts
from milarun.report.render import format as fmt
from milarun.tender.ranking import BidFigures, Ranking, Row

METRIC_AXIS = {
    "tco_per_score": "TCO $ / score (lower is better)",
    "price_per_score": "price $ / score (lower is better)",
}
WINNER, OTHER = "#3a3", "#69c"


def failed(bid: BidFigures | None) -> bool:
    """Whether verify FAILs the bid against the tender packed with it."""
    return bid is not None and bid.verified_ok is False


def _by_rank(ranking: Ranking) -> list[tuple[Row, BidFigures | None]]:
    """The rows as the page lists them: in rank order (unranked last), the bids verify
    FAILs under the others; each with its bid's figures where known."""
    bids: list[BidFigures | None] = list(ranking.bids) or [None] * len(ranking.rows)
    pairs = list(zip(ranking.rows, bids))
    return sorted(pairs, key=lambda pair: (failed(pair[1]), pair[0].rank or math.inf))


def winner(ranking: Ranking) -> str | None:
    """The bid the page crowns: the best-ranked one verify does not FAIL; none when every
    ranked bid fails (a ranking of bids that all fail verify has no winner)."""
    for row, bid in _by_rank(ranking):
        if row.rank is not None and not failed(bid):
            return row.name
    return None


def rows(ranking: Ranking, cells: list[dict[str, str]]) -> list[dict[str, str]]:
    """The table's rows as the page lists them (_by_rank): each row's ``cells`` (given in
    rank order, as render.cells makes them) with where the bid ran and its verify status."""
    by_rank = sorted(range(len(ranking.rows)), key=lambda i: ranking.rows[i].rank or math.inf)
    cell_of = {id(ranking.rows[i]): cell for i, cell in zip(by_rank, cells)}
    crowned = winner(ranking)
    out = []
    for row, bid in _by_rank(ranking):
        head, tail, kind = status(bid)
        out.append(
            {
                **cell_of[id(row)],
                "machine": machine(bid),
                "verdict": head,
                "said": tail,
                "verdict_class": kind,
                "winner": "yes" if row.name == crowned else "",
            }
        )
    return out


def machine(bid: BidFigures | None) -> str:
    """Where a bid's runs ran, as the report's header says it: hosts: devices (GPUs)."""
    about = bid.about if bid is not None else None
    if about is None or not about.devices:
        return "-"
    text = f"{', '.join(about.hosts)}: {fmt.devices(about.devices)}"
    return text + (f" ({'; '.join(about.gpus)})" if about.gpus else "")


def status(bid: BidFigures | None) -> tuple[str, str, str]:
    """A bid's verify status as its verdict (PASS, FAIL, not verified), the rest of what
    verify said, and the verdict's class."""
    if bid is None or not bid.verified:
        return "-", "", ""
    head, _, tail = bid.verified.partition(":")
    ok = bid.verified_ok
    return head, tail.strip(), "PASS" if ok else "FAIL" if ok is False else "light"


@dataclass
class Breakdown:
    """Per test (rows) and bid (columns, in rank order): its perf_adj and that as a fraction
    of the best bid's, with the test's weight."""

    bids: list[str]
    tests: list[str]
    weights: dict[str, float]
    cells: dict[tuple[str, int], tuple[float, float]]  # (test, column) -> (perf, of best)

    def cell(self, test: str, column: int) -> tuple[float, float] | None:
        return self.cells.get((test, column))


def breakdown(ranking: Ranking) -> Breakdown | None:
    """The per-test table; None without the bids' figures."""
    ordered = [(row, bid) for row, bid in _by_rank(ranking) if bid is not None]
    if not ordered:
        return None
    tests = sorted({t for _, bid in ordered for t in bid.perf_adj})
    weights: dict[str, float] = {}
    cells = {}
    for test in tests:
        values = [bid.perf_adj.get(test) for _, bid in ordered if bid is not None]
        best = max((v for v in values if v is not None and v > 0), default=None)
        for column, value in enumerate(values):
            if value is not None and best:
                cells[(test, column)] = (value, value / best)
        weights[test] = max(bid.weights.get(test, 0.0) for _, bid in ordered if bid is not None)
    return Breakdown([row.name for row, _ in ordered], tests, weights, cells)


def chart(ranking: Ranking) -> Markup | None:
    """Each ranked bid's score with its 95% interval, and the figure it is ranked by."""
    rows = [row for row, _ in _by_rank(ranking) if row.score]
    if not rows:
        return None
    metric = METRIC_AXIS.get(ranking.metric)
    with matplotlib.rc_context(charts.LARGE):
        fig = Figure(figsize=(9.0 if metric else 5.0, 0.9 + 0.32 * len(rows)))
        axes = fig.subplots(1, 2 if metric else 1, sharey=True, squeeze=False)[0]
        ys = list(range(len(rows)))[::-1]
        crowned = winner(ranking)
        colours = [WINNER if row.name == crowned else OTHER for row in rows]
        scores = [float(row.score or 0) for row in rows]
        low = [s - (row.score_ci or (s, s))[0] for s, row in zip(scores, rows)]
        high = [(row.score_ci or (s, s))[1] - s for s, row in zip(scores, rows)]
        axes[0].barh(ys, scores, height=0.6, color=colours)
        axes[0].errorbar(scores, ys, xerr=[low, high], fmt="none", ecolor="#333", capsize=3)
        axes[0].set_xlabel("score, with its 95% interval (higher is better)")
        if metric:
            values = [getattr(row, ranking.metric) or 0.0 for row in rows]
            axes[1].barh(ys, values, height=0.6, color=colours)
            axes[1].set_xlabel(metric)
        for ax in axes:
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: fmt.sig(value)))
            ax.grid(axis="x", alpha=0.3)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
        axes[0].set_yticks(ys, [row.name for row in rows])
        fig.set_layout_engine("constrained")
        return charts.svg(fig, charts.LARGE)
