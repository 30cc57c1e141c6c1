"""The server's pages (jinja2, autoescaped: every name a site pushed is text, never markup)
and their CSV. Formatting only: the figures come from milarun.server.queries."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from markupsafe import Markup
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from milarun.report.render import charts
from milarun.report.render import format as fmt


@dataclass
class Table:
    id: str
    columns: list[tuple[str, str]]
    rows: list[dict[str, Any]]
    links: dict[str, str] = field(default_factory=dict)  # column -> the row's key of its URL
    names: tuple[str, ...] = (
        "site",
        "name",
        "gpu",
        "test",
        "devices",
        "reason",
        "tender",
        "rule",
        "evidence",
    )


@dataclass
class Section:
    heading: str | None = None
    note: str | None = None
    table: Table | None = None
    pre: str | None = None
    chart: Markup | None = None


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return fmt.num(value, ",.4g") if math.isfinite(value) else "-"
    return str(value)


def page(
    title: str,
    sections: list[Section],
    intro: list[str] | None = None,
    alternates: list[tuple[str, str]] | None = None,
) -> str:
    from milarun.report.render import html

    env = html.environment()
    env.filters["cell"] = cell
    return env.get_template("server.html.j2").render(
        title=title, sections=sections, intro=intro or [], alternates=alternates or []
    )


def to_csv(rows: list[dict[str, Any]]) -> str:
    """Rows as CSV; a cell a spreadsheet would run as a formula is quoted as text."""
    out = io.StringIO()
    keys = list(rows[0]) if rows else ["empty"]
    writer = csv.DictWriter(out, fieldnames=keys, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _safe(row.get(k)) for k in keys})
    return out.getvalue()


def _safe(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    if isinstance(value, (list, dict)):
        return str(value)
    return value


def link(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


def with_links(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Upload rows with the URLs their cells link to."""
    return [
        {**r, "url": link("uploads", r["id"]), "site_url": link("sites", r["site"])} for r in rows
    ]


UPLOAD_COLUMNS = [
    ("pushed_at", "pushed (UTC)"),
    ("site", "site"),
    ("name", "name"),
    ("kind", "kind"),
    ("status", "status"),
    ("tier", "tier"),
    ("suite", "suite"),
    ("devices", "devices"),
    ("tender", "tender"),
    ("score", "score"),
    ("reason", "why rejected"),
]


def uploads_table(rows: list[dict[str, Any]], table_id: str = "uploads") -> Table:
    return Table(table_id, UPLOAD_COLUMNS, with_links(rows), {"name": "url", "site": "site_url"})


def spread_chart(rows: list[dict[str, Any]]) -> Markup | None:
    """Each site's mean rate per GPU model, its min-max as a bar (the report's chart style)."""
    if not rows:
        return None
    fig = Figure(figsize=(7.0, 0.4 + 0.32 * len(rows)))
    ax = fig.subplots()
    # "$" would start matplotlib's mathtext: a pushed name is plain text
    labels = [f"{r['gpu'][:30]} @ {r['site'][:30]}".replace("$", r"\$") for r in rows]
    ys = list(range(len(rows)))
    colours = charts.palette(sorted({r["gpu"] for r in rows}))
    for y, r in zip(ys, rows, strict=True):
        ax.hlines(y, r["min"], r["max"], color=colours[r["gpu"]], alpha=0.5, linewidth=6)
        ax.plot([r["mean"]], [y], "o", color=colours[r["gpu"]])
    ax.set_yticks(ys, labels)
    ax.invert_yaxis()
    ax.set_xlabel("examples/s (mean, min-max)")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: fmt.num(value, ",.4g")))
    return charts.svg(fig)
