"""Issue 49: the ranking page crowns no winner among bids that FAIL verify (it shaded a
green "winner" among bids that all failed), and lists the failed bids under the others."""

from __future__ import annotations

import re

from test_rank_text import bid  # a bid's figures with its verify status (issue 50's)

from milarun.tender import page, ranking, render


def ranked(*bids: ranking.BidFigures) -> ranking.Ranking:
    found = ranking.rank_bids(list(bids), ranking.Costs(), resamples=200)
    found.bids = list(bids)
    return found


def listed(html: str) -> list[tuple[str, str]]:
    """The bids table's rows: (bid name, the row's class)."""
    table = html.split('<table id="bids">', 1)[1].split("</table>", 1)[0]
    return [
        (name, cls or "")
        for cls, name in re.findall(
            r'<tr(?: class="(\w+)")?>\s*<td>[^<]*</td><td class="name"><b>([^<]+)</b>', table
        )
    ]


def test_no_winner_when_every_bid_fails_verify():
    found = ranked(bid("fast", 300.0, False), bid("slow", 100.0, False))
    assert page.winner(found) is None
    html = render.to_html(found, "bids")
    assert 'class="winner"' not in html
    assert 'id="no-winner"' in html and "every ranked bid FAILs" in html
    assert listed(html) == [("fast", "failed"), ("slow", "failed")]


def test_failed_bids_are_listed_under_the_verified_ones_and_never_crowned():
    found = ranked(
        bid("forged", 500.0, False), bid("honest", 200.0, True), bid("plain", 100.0, None)
    )
    assert page.winner(found) == "honest"
    html = render.to_html(found, "bids")
    assert listed(html) == [("honest", "winner"), ("plain", ""), ("forged", "failed")]
    assert "The winner (honest) in green" in html


def test_a_ranking_of_verified_bids_crowns_the_first():
    found = ranked(bid("a", 100.0, True), bid("b", 300.0, True))
    assert page.winner(found) == "b"
    assert listed(render.to_html(found, "bids"))[0] == ("b", "winner")
