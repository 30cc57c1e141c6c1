"""The ranking of bids as text, JSON, CSV or a self-contained HTML page (formatting only)."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict
from typing import Any

from milarun.report.render import format as fmt
from milarun.tender.ranking import Ranking

FORMATS = ("text", "json", "csv")
METRIC_TEXT = {
    "tco_per_score": "total cost of ownership / score (lower is better)",
    "price_per_score": "price / score (lower is better)",
    "score": "score (higher is better)",
}
# the columns the page always shows; the others where some bid has a figure
ALWAYS = ("rank", "name", "score", "ci", "p_best")
COLUMNS = (
    ("rank", "rank"),
    ("name", "bid"),
    ("score", "score"),
    ("ci", "95% CI"),
    ("price", "price $"),
    ("price_per_score", "$/score"),
    ("watts", "power W"),
    ("energy_cost", "energy $"),
    ("tco", "TCO $"),
    ("tco_per_score", "TCO/score"),
    ("p_best", "P(best)"),
)


def cells(ranking: Ranking) -> list[dict[str, str]]:
    """Each bid's row as the table shows it."""
    out = []
    for row in sorted(ranking.rows, key=lambda r: r.rank or math.inf):
        low, high = row.score_ci or (None, None)
        out.append(
            {
                "rank": fmt.num(row.rank, "d"),
                "name": row.name,
                "score": fmt.sig(row.score),
                "ci": f"{fmt.sig(low)} \u2013 {fmt.sig(high)}" if row.score_ci else "-",
                "price": fmt.num(row.price, ",.0f"),
                "price_per_score": fmt.num(row.price_per_score, ",.2f"),
                "watts": fmt.num(row.watts, ",.0f")
                + (f" ({row.power_source})" if row.power_source else ""),
                "energy_cost": fmt.num(row.energy_cost, ",.0f"),
                "tco": fmt.num(row.tco, ",.0f"),
                "tco_per_score": fmt.num(row.tco_per_score, ",.2f"),
                "p_best": fmt.num(row.p_best, ".1%"),
            }
        )
    return out


def _header_lines(ranking: Ranking) -> list[str]:
    costs = ranking.costs
    lines = [f"ranked by {METRIC_TEXT[ranking.metric]}"]
    if costs.power_cost:
        lines.append(
            f"energy: ${costs.power_cost:g}/kWh over {costs.years:g} year(s) at PUE {costs.pue:g}"
            + (", on the whole node's power (the tender asks for it)" if costs.node_power else "")
        )
    if ranking.stability is not None:
        lines.append(
            f"stability: the winner holds in {ranking.stability:.1%} of draws with every "
            "weight moved by up to +-25%"
        )
    return lines + [f"note: {n}" for n in ranking.notes]


VERIFY_TEXT = {True: "PASS", False: "FAIL", None: "-"}


def _text_rows(ranking: Ranking) -> list[dict[str, str]]:
    """The rows in their place (the bids verify FAILs after the others), the rank column
    that place, with each bid's verify status."""
    by_rank = sorted(ranking.rows, key=lambda r: r.rank or math.inf)
    cell_of = {id(row): cell for row, cell in zip(by_rank, cells(ranking))}
    return [
        {
            **cell_of[id(row)],
            "rank": fmt.num(row.place, "d"),
            "verify": VERIFY_TEXT[row.verified_ok],
        }
        for row in sorted(ranking.rows, key=lambda r: r.place or math.inf)
    ]


def to_text(ranking: Ranking) -> str:
    rows = _text_rows(ranking)
    columns: tuple[tuple[str, str], ...] = COLUMNS
    if any(r.verified_ok is not None for r in ranking.rows):
        columns = COLUMNS[:2] + (("verify", "verify"),) + COLUMNS[2:]
    widths = {k: max(len(title), *(len(r[k]) for r in rows)) for k, title in columns}
    lines = ["  ".join(title.rjust(widths[k]) for k, title in columns)]
    lines += ["  ".join(r[k].rjust(widths[k]) for k, _ in columns) for r in rows]
    failed = [r for r in ranking.rows if r.verified_ok is False and r.rank is not None]
    notes = [
        f"note: verify FAILs {r.name} against its tender: placed after every bid it does not "
        f"fail (its figures alone would rank it {r.rank})"
        for r in sorted(failed, key=lambda r: r.rank or math.inf)
    ]
    return "\n".join(lines + [""] + _header_lines(ranking) + notes) + "\n"


def to_records(ranking: Ranking) -> dict[str, Any]:
    return {
        "metric": ranking.metric,
        "costs": asdict(ranking.costs),
        "stability": ranking.stability,
        "notes": ranking.notes,
        "bids": [asdict(r) for r in sorted(ranking.rows, key=lambda r: r.rank or math.inf)],
    }


def to_json(ranking: Ranking) -> str:
    return json.dumps(to_records(ranking), indent=2) + "\n"


def to_csv(ranking: Ranking) -> str:
    records = to_records(ranking)["bids"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(records[0]) if records else ["name"])
    writer.writeheader()
    for record in records:
        record["score_ci"] = "-".join(map(str, record["score_ci"] or ()))
        writer.writerow(record)
    return out.getvalue()


def render(ranking: Ranking, fmt: str) -> str:
    return {"text": to_text, "json": to_json, "csv": to_csv}[fmt](ranking)


def to_html(ranking: Ranking, title: str) -> str:
    """One self-contained page (no network), every value escaped, styled as the report."""
    from milarun.report.render import html  # matplotlib and jinja2: for the page only
    from milarun.tender import page

    rows = page.rows(ranking, cells(ranking))  # the bids verify FAILs listed last
    shown = [(k, t) for k, t in COLUMNS if k in ALWAYS or any(r[k] != "-" for r in rows)]
    return (
        html.environment()
        .get_template("ranking.html.j2")
        .render(
            title=title,
            columns=shown,
            rows=rows,
            header=_header_lines(ranking),
            breakdown=page.breakdown(ranking),
            chart=page.chart(ranking),
            winner=page.winner(ranking),
        )
    )
