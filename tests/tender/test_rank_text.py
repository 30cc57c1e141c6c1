"""`report --rank` as text (issue 50): a bid that verify FAILs is marked and placed after the
bids it does not fail, with a note of where its figures alone would put it; without any
verify status the table is as before."""

from __future__ import annotations

import json

from milarun.report import stats
from milarun.tender import ranking, render


def bid(name: str, score: float, ok: bool | None) -> ranking.BidFigures:
    runs = {"s.a": stats.RunSet([score * 0.99, score, score * 1.01], 0)}
    said = {True: "PASS: every rule passes", False: "FAIL: 1 rule(s) FAIL: busy", None: ""}
    return ranking.BidFigures(
        name, score, (score * 0.98, score * 1.02), {"s.a": score}, runs, {"s.a": 1.0},
        verified=said[ok], verified_ok=ok,
    )  # fmt: skip


def table(text: str) -> list[list[str]]:
    lines = text.split("\n\n", 1)[0].splitlines()
    return [line.split() for line in lines]


def test_a_failed_bid_is_marked_and_placed_after_the_others():
    bids = [bid("forged", 500.0, False), bid("honest", 200.0, True), bid("plain", 100.0, None)]
    found = ranking.rank_bids(bids, ranking.Costs(), resamples=200)
    text = render.to_text(found)
    head, *rows = table(text)
    assert head[:4] == ["rank", "bid", "verify", "score"]
    assert [r[:3] for r in rows] == [
        ["1", "honest", "PASS"],
        ["2", "plain", "-"],
        ["3", "forged", "FAIL"],
    ]
    assert (
        "note: verify FAILs forged against its tender: placed after every bid it does not "
        "fail (its figures alone would rank it 1)"
    ) in text
    # the winner whose stability is said is the first placed, not the forged bid
    assert found.stability is not None and found.stability > 0.9
    # the figures' rank is kept beside the place (JSON, the page)
    records = json.loads(render.to_json(found))["bids"]
    assert {(b["name"], b["rank"], b["place"]) for b in records} == {
        ("forged", 1, 3), ("honest", 2, 1), ("plain", 3, 2),
    }  # fmt: skip


def test_without_verify_the_table_is_ranked_by_the_figures():
    found = ranking.rank_bids([bid("a", 100.0, None), bid("b", 300.0, None)], ranking.Costs())
    head, *rows = table(render.to_text(found))
    assert "verify" not in head and [r[:2] for r in rows] == [["1", "b"], ["2", "a"]]
    assert "verify FAILs" not in render.to_text(found)
