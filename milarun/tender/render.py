"""The ranking of bids as text, JSON, CSV or a self-contained HTML page (formatting only)."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict
from typing import Any

from jinja2 import Environment

from milarun.tender.ranking import Ranking

FORMATS = ("text", "json", "csv")
METRIC_TEXT = {
    "tco_per_score": "total cost of ownership / score (lower is better)",
    "price_per_score": "price / score (lower is better)",
    "score": "score (higher is better)",
}
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


def _n(value: Any, spec: str = ",.4g") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def cells(ranking: Ranking) -> list[dict[str, str]]:
    """Each bid's row as the table shows it."""
    out = []
    for row in sorted(ranking.rows, key=lambda r: r.rank or math.inf):
        low, high = row.score_ci or (None, None)
        out.append(
            {
                "rank": _n(row.rank, "d"),
                "name": row.name,
                "score": _n(row.score),
                "ci": f"{_n(low)}-{_n(high)}" if row.score_ci else "-",
                "price": _n(row.price, ",.0f"),
                "price_per_score": _n(row.price_per_score, ",.2f"),
                "watts": _n(row.watts, ",.0f"),
                "energy_cost": _n(row.energy_cost, ",.0f"),
                "tco": _n(row.tco, ",.0f"),
                "tco_per_score": _n(row.tco_per_score, ",.2f"),
                "p_best": _n(row.p_best, ".1%"),
            }
        )
    return out


def _header_lines(ranking: Ranking) -> list[str]:
    costs = ranking.costs
    lines = [f"ranked by {METRIC_TEXT[ranking.metric]}"]
    if costs.power_cost:
        lines.append(
            f"energy: ${costs.power_cost:g}/kWh over {costs.years:g} year(s) at PUE {costs.pue:g}"
        )
    if ranking.stability is not None:
        lines.append(
            f"stability: the winner holds in {ranking.stability:.1%} of draws with every "
            "weight moved by up to +-25%"
        )
    return lines + [f"note: {n}" for n in ranking.notes]


def to_text(ranking: Ranking) -> str:
    rows = cells(ranking)
    widths = {k: max(len(title), *(len(r[k]) for r in rows)) for k, title in COLUMNS}
    lines = ["  ".join(title.rjust(widths[k]) for k, title in COLUMNS)]
    lines += ["  ".join(r[k].rjust(widths[k]) for k, _ in COLUMNS) for r in rows]
    return "\n".join(lines + [""] + _header_lines(ranking)) + "\n"


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


# the marker line is milarun.report.render.html.MARKER: `--html` replaces only a milarun page
PAGE = """<!DOCTYPE html>
<!-- milarun report -->
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body { font-family: sans-serif; margin: 2em; }
table { border-collapse: collapse; }
th, td { border: 1px solid #bbb; padding: 0.3em 0.6em; text-align: right; }
th { background: #eee; } tr.winner td { background: #e3f5e1; }
</style></head><body>
<h1>{{ title }}</h1>
<table><tr>{% for _, title in columns %}<th>{{ title }}</th>{% endfor %}</tr>
{% for row in rows %}<tr{% if row.rank == "1" %} class="winner"{% endif %}>
{% for key, _ in columns %}<td>{{ row[key] }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% for line in header %}<p>{{ line }}</p>{% endfor %}
</body></html>
"""


def to_html(ranking: Ranking, title: str) -> str:
    """One self-contained page (no network), every value escaped."""
    template = Environment(autoescape=True).from_string(PAGE)
    return template.render(
        title=title, columns=COLUMNS, rows=cells(ranking), header=_header_lines(ranking)
    )
