"""Ranking bids: score, price, energy cost and total cost of ownership, with uncertainty.

Per bid: the score and its 95% interval (the report's own), price/score, the machine's
power under the suite (the whole node's from its BMC where every scored test has it, else
each test's measured GPU watts per instance x the instances that ran side by side; averaged
over tests as the score is: weighted geometric mean), the energy
cost of running it all the time for ``years`` (x PUE, at $/kWh), the total cost of
ownership (price + energy) and TCO/score. Bids are ranked by the best figure every bid
has: TCO/score (lower is better) when every bid has a price and a measured power and a
power cost is given, else price/score, else the score (higher is better). Energy is
compared like with like: when some bids' power is the node's and others' the GPUs' only (or
the tender asks for node power, Costs.node_power, and a bid has none), TCO is not ranked on.

Uncertainty: the probability of being best is the share of bootstrap draws (each bid's
score resampled over its runs, as the report's interval) in which the bid wins; the
stability is the share of draws in which the winner holds when every test's weight moves
independently by up to +-25%.

A bid with a run measured on a busy machine (other processes took a quarter or more of its
CPUs: report.busy) is ranked by its score but has no probability of being best, and the
others' probability and the stability are among the quiet bids only, where there are two or
more: its draws say how fast the machine went beside someone else's work, and no share of
them is a verdict (docs/busy-and-acceptance.md). A note names it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from milarun.report import stats
from milarun.report.about import About

HOURS_PER_YEAR = 24 * 365.25
WEIGHT_SWING = 0.25
WEIGHT_DRAWS = 2000


@dataclass(frozen=True)
class BidFigures:
    """One bid as ranking sees it (from its report)."""

    name: str
    score: float | None
    score_ci: tuple[float, float] | None
    perf_adj: dict[str, float]  # scored tests
    runs: dict[str, stats.RunSet]
    weights: dict[str, float]
    watts: dict[str, float] = field(default_factory=dict)  # machine W per test, where measured
    node_watts: dict[str, float] = field(default_factory=dict)  # the node's W (its BMC)
    price: float | None = None
    busy_runs: int = 0  # successful runs measured on a busy machine
    measured_runs: int = 0  # successful runs
    busy_share: float | None = None  # the most of a run's CPUs other processes took
    # for the page: where it ran (its runs' hosts, devices, GPUs), and what verify says of it
    # against the tender packed with it (ok None: not verified)
    about: About | None = None
    verified: str = ""
    verified_ok: bool | None = None
    node_power_asked: bool = False  # the tender packed with it requires node power

    @property
    def busy(self) -> bool:
        return self.busy_runs > 0


@dataclass(frozen=True)
class Costs:
    """What the bids are priced at."""

    power_cost: float | None = None  # $/kWh
    years: float = 5.0
    pue: float = 1.0
    node_power: bool = False  # the tender asks for the node's power (a BMC), not the GPUs'


@dataclass
class Row:
    name: str
    score: float | None
    score_ci: tuple[float, float] | None
    price: float | None
    price_per_score: float | None
    watts: float | None
    energy_kwh: float | None
    energy_cost: float | None
    tco: float | None
    tco_per_score: float | None
    power_source: str | None = None  # "node" (its BMC) or "GPUs"; None: no power measured
    rank: int | None = None
    p_best: float | None = None  # None: a busy bid, or fewer than two quiet bids
    busy_runs: int = 0  # its runs measured on a busy machine (BidFigures)
    measured_runs: int = 0
    verified_ok: bool | None = None  # what verify says of its bid (None: not verified)
    # its place with the bids verify FAILs after every other (rank: by its figures alone)
    place: int | None = None


@dataclass
class Ranking:
    rows: list[Row]
    metric: str  # "tco_per_score", "price_per_score" or "score"
    costs: Costs
    stability: float | None  # share of weight draws where the winner holds
    notes: list[str] = field(default_factory=list)
    bids: list[BidFigures] = field(default_factory=list)  # the rows' bids, in their order

    @property
    def lower_is_better(self) -> bool:
        return self.metric != "score"


def _geomean_of_positives(values: dict[str, float], weights: dict[str, float]) -> float | None:
    """The weighted geometric mean over the tests with a positive value and weight; None
    without one."""
    tests = [t for t in values if weights.get(t, 0) > 0 and values[t] > 0]
    if not tests:
        return None
    return stats.weighted_geomean({t: values[t] for t in tests}, weights)


def power_of(bid: BidFigures, costs: Costs) -> tuple[dict[str, float], str | None]:
    """The per-test power a bid's energy cost is taken from, and whose it is: the node's
    where its BMC measured every scored test, else (unless the tender asks for the node's)
    the GPUs'."""
    scored = [t for t, w in bid.weights.items() if w > 0]
    if bid.node_watts and all(t in bid.node_watts for t in scored):
        return bid.node_watts, "node"
    if costs.node_power or not bid.watts:
        return {}, None
    return bid.watts, "GPUs"


def _row(bid: BidFigures, costs: Costs) -> Row:
    power, source = power_of(bid, costs)
    watts = _geomean_of_positives(power, bid.weights)
    kwh = watts / 1000 * HOURS_PER_YEAR * costs.years * costs.pue if watts is not None else None
    energy = kwh * costs.power_cost if kwh is not None and costs.power_cost else None
    tco = bid.price + energy if bid.price is not None and energy is not None else None
    score = bid.score

    def per(value: float | None) -> float | None:
        return value / score if value is not None and score else None

    return Row(
        bid.name, score, bid.score_ci, bid.price, per(bid.price), watts, kwh, energy, tco, per(tco),
        power_source=source if watts is not None else None,
        busy_runs=bid.busy_runs, measured_runs=bid.measured_runs,
    )  # fmt: skip


def _metric(rows: list[Row], costs: Costs) -> str:
    like_with_like = len({r.power_source for r in rows}) == 1
    if costs.power_cost and like_with_like and all(r.tco is not None for r in rows):
        return "tco_per_score"
    if all(r.price is not None for r in rows):
        return "price_per_score"
    return "score"


def _values(
    bids: list[BidFigures],
    metric: str,
    costs: Costs,
    scores: np.ndarray,
    tests: list[str],
    moved: np.ndarray,
) -> np.ndarray:
    """The metric per draw (rows) and bid (columns), lower is better, from drawn scores and
    the test weights' multipliers of each draw (``moved``, columns in ``tests`` order)."""
    if metric == "score":
        return -scores
    out = np.empty_like(scores)
    for j, bid in enumerate(bids):
        cost = np.full(scores.shape[0], float(bid.price or 0.0))
        if metric == "tco_per_score":
            cost = cost + _energy_cost(bid, costs, tests, moved)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[:, j] = np.where(scores[:, j] > 0, cost / scores[:, j], np.inf)
    return out


def _moved_geomean(
    values: dict[str, float], weights: dict[str, float], tests: list[str], moved: np.ndarray
) -> np.ndarray:
    """Per draw, the weighted geometric mean of ``values`` with each weight x its multiplier."""
    used = [t for t in values if values[t] > 0 and weights.get(t, 0) > 0]
    if not used:
        return np.zeros(moved.shape[0])
    w = np.column_stack([moved[:, tests.index(t)] * weights[t] for t in used])
    logs = np.log([values[t] for t in used])
    return np.asarray(np.exp((w * logs).sum(axis=1) / w.sum(axis=1)))


def _energy_cost(bid: BidFigures, costs: Costs, tests: list[str], moved: np.ndarray) -> np.ndarray:
    watts = _moved_geomean(power_of(bid, costs)[0], bid.weights, tests, moved)
    return watts / 1000 * HOURS_PER_YEAR * costs.years * costs.pue * float(costs.power_cost or 0)


def rank_bids(
    bids: list[BidFigures], costs: Costs, resamples: int = stats.RESAMPLES, seed: int = stats.SEED
) -> Ranking:
    """Rank the bids, with the probability of being best and the winner's stability; on
    the node's power where a bid's packed tender requires it, as with Costs.node_power."""
    costs = replace(costs, node_power=costs.node_power or any(b.node_power_asked for b in bids))
    rows = [_row(b, costs) for b in bids]
    metric = _metric(rows, costs)
    notes = []
    sources = {r.power_source for r in rows if r.power_source}
    if costs.power_cost and metric != "tco_per_score" and len(sources) > 1:
        notes.append(
            "some bids' power is the whole node's (BMC), others' the GPUs' only: energy is "
            "not compared like with like, ranked without it"
        )
    elif costs.power_cost and metric != "tco_per_score" and costs.node_power:
        notes.append("the tender asks for node power and not every bid measured it (a BMC)")
    elif costs.power_cost and metric != "tco_per_score":
        notes.append("not every bid has a price and a measured power: ranked without energy")
    scored = [i for i, r in enumerate(rows) if r.score]
    key = {
        "score": lambda r: -(r.score or 0),
        "price_per_score": lambda r: r.price_per_score or math.inf,
        "tco_per_score": lambda r: r.tco_per_score or math.inf,
    }[metric]
    for place, i in enumerate(sorted(scored, key=lambda i: key(rows[i])), 1):
        rows[i].rank = place
    for row, bid in zip(rows, bids):
        row.verified_ok = bid.verified_ok
    standing = sorted(scored, key=lambda i: (rows[i].verified_ok is False, rows[i].rank))
    for place, i in enumerate(standing, 1):
        rows[i].place = place
    if not scored:
        return Ranking(rows, metric, costs, None, notes + ["no bid has a score"])
    tests = sorted({t for b in bids for t in b.weights if b.weights[t] > 0})
    quiet = [j for j, b in enumerate(bids) if not b.busy]  # every bid, where none is busy
    notes += _busy_notes(bids, quiet)
    if len(quiet) < 2 and len(quiet) < len(bids):  # no chance to give beside a busy bid
        return Ranking(rows, metric, costs, None, notes)
    among = [bids[j] for j in quiet]
    draws = np.column_stack([_score_draws(bids[j], resamples, seed + j) for j in quiet])
    same = np.ones((resamples, len(tests)))
    best = np.argmin(_values(among, metric, costs, draws, tests, same), axis=1)
    for i, j in enumerate(quiet):
        rows[j].p_best = float(np.mean(best == i))
    ranked = [i for i, j in enumerate(quiet) if j in scored]
    if not ranked:
        return Ranking(rows, metric, costs, None, notes)
    rng = np.random.default_rng(seed)
    moved = rng.uniform(1 - WEIGHT_SWING, 1 + WEIGHT_SWING, size=(WEIGHT_DRAWS, len(tests)))
    scores = np.column_stack([_moved_geomean(b.perf_adj, b.weights, tests, moved) for b in among])
    values = _values(among, metric, costs, scores, tests, moved)
    excluded = [k for k, b in enumerate(among) if b.verified_ok is False]
    if len(excluded) < len(among):  # the winner is among the bids verify does not FAIL
        values[:, excluded] = np.inf
    winners = np.argmin(values, axis=1)
    # the winner the text and the page name: the best a verify FAIL does not exclude
    winner = min(ranked, key=lambda i: (rows[quiet[i]].verified_ok is False, key(rows[quiet[i]])))
    return Ranking(rows, metric, costs, float(np.mean(winners == winner)), notes)


def _busy_notes(bids: list[BidFigures], quiet: list[int]) -> list[str]:
    """What a busy bid is, and what P(best) is among."""
    notes = [
        f"{b.name}: {b.busy_runs} of {b.measured_runs} run(s) measured on a busy machine"
        + (f" (others took up to {b.busy_share:.0%} of a run's CPUs)" if b.busy_share else "")
        + ": ranked by its score, no P(best): not a measurement of the machine alone"
        for b in bids
        if b.busy
    ]
    if notes and len(quiet) >= 2:
        notes.append(
            f"P(best) and the stability are among the {len(quiet)} bids measured on a quiet machine"
        )
    elif notes:
        notes.append(
            "P(best) and the stability not given: fewer than two bids measured on a quiet machine"
        )
    return notes


def _score_draws(bid: BidFigures, resamples: int, seed: int) -> np.ndarray:
    if not bid.score:
        return np.zeros(resamples)
    found = stats.score_interval(bid.runs, bid.weights, resamples=resamples, seed=seed)
    return found[0] if found is not None else np.full(resamples, bid.score)
