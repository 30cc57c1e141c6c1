"""The ranking's energy cost from the whole node's power (a BMC, issue 51): TCO on node watts
where every scored test has them, never node watts against GPU-only watts, and a tender that
asks for node power gives a bid without it no TCO."""

from __future__ import annotations

import pytest

from milarun.report import stats
from milarun.report.summary_entry import SummaryEntry
from milarun.tender import bids as tender_bids
from milarun.tender import ranking, render

TESTS = {"s.a": 1.0, "s.b": 1.0}
COSTS = ranking.Costs(power_cost=0.2, years=5.0, pue=1.0)


def bid(name, score, price, gpu_watts, node_watts=None):
    runs = {t: stats.RunSet([score * 0.99, score, score * 1.01], 0) for t in TESTS}
    return ranking.BidFigures(
        name, score, (score * 0.98, score * 1.02), dict.fromkeys(TESTS, score), runs, TESTS,
        watts=dict.fromkeys(TESTS, gpu_watts), node_watts=dict.fromkeys(TESTS, node_watts)
        if node_watts else {}, price=price,
    )  # fmt: skip


def test_tco_is_on_the_node_when_every_bid_measured_it():
    # the same GPUs' power; b's node draws 2,500 W more (hungry CPUs, fans: $21,915 over 5
    # years at $0.2/kWh): a loses on GPU power alone ($10,000 dearer), wins at the plug
    a = bid("a", 100.0, 300_000.0, 5_000.0, node_watts=6_500.0)
    b = bid("b", 100.0, 290_000.0, 5_000.0, node_watts=9_000.0)
    found = ranking.rank_bids([a, b], COSTS, resamples=200)
    assert found.metric == "tco_per_score"
    rows = {r.name: r for r in found.rows}
    assert rows["a"].power_source == rows["b"].power_source == "node"
    assert rows["a"].watts == pytest.approx(6_500.0)
    kwh = 6_500.0 / 1000 * ranking.HOURS_PER_YEAR * 5
    assert rows["a"].tco == pytest.approx(300_000.0 + 0.2 * kwh)
    assert rows["a"].rank == 1 and rows["b"].rank == 2
    assert "6,500 (node)" in render.to_text(found)
    # on GPU power only, b's lower price wins: the node's power changed the verdict
    gpu_only = [bid("a", 100.0, 300_000.0, 5_000.0), bid("b", 100.0, 290_000.0, 5_000.0)]
    assert ranking.rank_bids(gpu_only, COSTS, resamples=200).rows[1].rank == 1


def test_node_against_gpu_only_power_is_not_ranked_on():
    a = bid("a", 100.0, 300_000.0, 5_000.0, node_watts=6_500.0)
    b = bid("b", 100.0, 290_000.0, 5_000.0)
    found = ranking.rank_bids([a, b], COSTS, resamples=200)
    assert found.metric == "price_per_score"
    assert any("not compared like with like" in n for n in found.notes)


def test_a_tender_that_asks_for_node_power():
    a = bid("a", 100.0, 300_000.0, 5_000.0, node_watts=6_500.0)
    b = bid("b", 100.0, 290_000.0, 5_000.0)
    costs = ranking.Costs(power_cost=0.2, node_power=True)
    found = ranking.rank_bids([a, b], costs, resamples=200)
    rows = {r.name: r for r in found.rows}
    assert rows["b"].tco is None and rows["b"].power_source is None
    assert found.metric == "price_per_score"
    assert any("asks for node power" in n for n in found.notes)


def test_node_watts_from_a_summary_entry():
    def node_watts(entry: dict) -> float | None:
        return tender_bids._node_watts(SummaryEntry.from_dict(entry) or SummaryEntry())

    assert node_watts({"node_energy": {"node_watts": 6500.0}}) == 6500.0
    assert node_watts({"node_energy": {"node_watts": None}}) is None
    assert node_watts({"node_energy": {"node_watts": "6500"}}) is None  # hand-edited: no figure
    assert node_watts({"energy": {"watts": 700.0}}) is None
