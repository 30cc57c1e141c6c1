"""`milarun report BID... --rank`: three packages ranked with price and energy, the chance of
each being best and the winner's stability under moved weights."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

import bidkit
from conftest import milarun, one_line_error
from milarun import errors
from milarun.tender import bids, package, ranking, render

# (rates of polynome and sine_wave, watts per instance, price)
BIDS = {
    "fast": ({"quick.polynome": 50_000.0, "quick.sine_wave": 1000.0}, 400.0, 300_000.0),
    "frugal": ({"quick.polynome": 45_000.0, "quick.sine_wave": 950.0}, 200.0, 250_000.0),
    "slow": ({"quick.polynome": 20_000.0, "quick.sine_wave": 400.0}, 300.0, 260_000.0),
}


# one worker runs the module, so its shared bid is made once
pytestmark = pytest.mark.xdist_group(name="tender_ranking")


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("bids")
    paths = []
    for i, (name, (rates, watts, _)) in enumerate(BIDS.items()):
        folder = bidkit.synthetic_run(root / name, rates, watts=watts, seed=i)
        paths.append(package.make_package(folder, root / f"{name}.tar.gz").out)
    return paths


def test_three_bids_rank_with_price_and_energy(packages, tmp_path):
    prices = ",".join(str(int(p)) for _, _, p in BIDS.values())
    page = tmp_path / "rank.html"
    done = milarun(
        "report", *packages, "--rank", "--price", prices, "--power-cost", "0.2",
        "--years", "4", "--pue", "1.3", "--format", "json", "--html", page,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["metric"] == "tco_per_score"
    rows = {b["name"]: b for b in found["bids"]}
    for name, (_, watts, price) in BIDS.items():
        row = rows[name]
        # two instances side by side: the machine draws twice an instance's power
        assert row["watts"] == pytest.approx(2 * watts)
        kwh = 2 * watts / 1000 * 24 * 365.25 * 4 * 1.3
        assert row["energy_cost"] == pytest.approx(kwh * 0.2)
        assert row["tco"] == pytest.approx(price + kwh * 0.2)
        assert row["tco_per_score"] == pytest.approx(row["tco"] / row["score"])
        low, high = row["score_ci"]
        assert low <= row["score"] <= high
    assert [b["name"] for b in found["bids"]] == ["frugal", "fast", "slow"]
    assert rows["frugal"]["rank"] == 1 and rows["frugal"]["p_best"] > 0.5
    assert sum(r["p_best"] for r in rows.values()) == pytest.approx(1.0)
    assert rows["slow"]["p_best"] == 0.0
    assert 0.5 < found["stability"] <= 1.0
    text = page.read_text()
    assert "frugal" in text and "<script" not in text
    # nothing from the network (the chart's SVG namespaces are names, not fetches)
    assert not re.search(r"(src|href)=[\"']?(https?:)?//", text) and "<link" not in text


def test_the_ranking_in_text_and_csv(packages):
    ranked = bids.rank(packages, [300_000.0, 250_000.0, 260_000.0], ranking.Costs())
    assert ranked.metric == "price_per_score"  # no power cost: price alone
    text = render.to_text(ranked)
    assert "ranked by price / score" in text and "stability: the winner holds" in text
    table = list(csv.DictReader(io.StringIO(render.to_csv(ranked))))
    assert [r["name"] for r in table][0] == "frugal" and table[0]["rank"] == "1"
    by_score = bids.rank(packages, None, ranking.Costs())
    assert by_score.metric == "score" and by_score.rows[0].rank == 1  # fast has the top score


def test_one_price_per_bid_is_required(packages):
    with pytest.raises(errors.TenderError, match=r"2 price\(s\) for 3 bid\(s\)"):
        bids.rank(packages, [1.0, 2.0], ranking.Costs())
    done = milarun("report", *packages)
    assert "--rank" in one_line_error(done)
