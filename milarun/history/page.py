"""The history as one self-contained HTML page (jinja2, autoescaped; charts as inline SVG
drawn by matplotlib): per series its rate over time with the 95% band, each point coloured
by its verdict, and the table of points with their notes (and their node examples per joule
where a BMC measured some of the series' points). Formatting only."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
from markupsafe import Markup
from matplotlib import dates as mdates
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from milarun.history import render, trends
from milarun.report.render import charts, html
from milarun.report.render import format as fmt

# The time axis around a series of one moment, and the least margin around a longer one.
ONE_MOMENT_PAD = np.timedelta64(12, "h")
MIN_PAD = np.timedelta64(10, "m")
# Charts drawn at most (the series with alerts first); past this a series is a table only.
MAX_CHARTS = 60
COLOURS = {
    trends.REGRESSION: "#e22",
    trends.SUSPICIOUS: "#f80",
    trends.IMPROVEMENT: "#3a3",
    trends.NO_CHANGE: "#36c",
    trends.INSUFFICIENT: "#999",
    trends.BUSY: "#b6b",  # measured beside other work: shown, never judged
}
CLASSES = {
    trends.REGRESSION: "bad",
    trends.SUSPICIOUS: "warn",
    trends.IMPROVEMENT: "good",
    trends.NO_CHANGE: "",
    trends.INSUFFICIENT: "light",
    trends.BUSY: "light",
}


def chart(points: list[trends.Point]) -> Markup:
    """Rate over time: the line through the points' rates, the 95% band, verdict colours;
    the time axis spans the points (a series of one moment: a day around it)."""
    fig = Figure(figsize=(7.0, 2.2))
    ax = fig.subplots()
    measured = [p for p in points if p.rate is not None]
    times = np.array([int(p.when) for p in measured], dtype="datetime64[s]")
    rates = np.array([p.rate for p in measured], dtype=float)
    ax.plot(times, rates, color="#bbb", linewidth=1, zorder=1)
    banded = [i for i, p in enumerate(measured) if p.interval is not None]
    bands = np.array([measured[i].interval for i in banded], dtype=float).reshape(-1, 2)
    one_moment = len(set(times.tolist())) <= 1
    if banded and one_moment:  # no area to fill: each interval as a bar
        ax.vlines(times[banded], bands[:, 0], bands[:, 1], color="#36c", alpha=0.4, linewidth=4)
    elif banded:
        ax.fill_between(
            times[banded], bands[:, 0], bands[:, 1], color="#36c", alpha=0.15, linewidth=0
        )
    ax.scatter(times, rates, c=[COLOURS[p.verdict] for p in measured], s=14, zorder=2)
    if measured:
        first, last = times.min(), times.max()
        pad = ONE_MOMENT_PAD if one_moment else max((last - first) / 20, MIN_PAD)
        ax.set_xlim(first - pad, last + pad)
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    top = max([0.0, *rates.tolist(), *bands[:, 1].tolist()])
    ax.set_ylim(0, top * 1.12 if top > 0 else 1)  # the highest point inside the frame
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: fmt.sig(value)))
    ax.set_ylabel("examples/s")
    ax.grid(alpha=0.3)
    return charts.svg(fig)


def _environment() -> jinja2.Environment:
    """The report's environment (milarun/templates, autoescaped, strict), with ours."""
    env = html.environment()
    env.filters.update(
        sig=render.rate_text, when=render.when, interval=render.interval, change=render.change
    )
    env.filters["figure"] = fmt.sig
    env.filters["verdict_class"] = CLASSES.get
    return env


def page_html(
    series: dict[str, list[trends.Point]], filters: trends.Filters, options: trends.Options
) -> str:
    alerting = sorted(
        series, key=lambda s: not any(p.verdict == trends.REGRESSION for p in series[s])
    )
    charted = set(alerting[:MAX_CHARTS])
    shown: list[dict[str, Any]] = [
        {
            "name": name,
            "points": points,
            "chart": chart(points) if name in charted else None,
            "node": any(p.node_perf_per_watt is not None for p in points),  # a BMC's column
        }
        for name, points in series.items()
    ]
    chosen = {k: v for k, v in vars(filters).items() if v is not None and k != "since"}
    if filters.since is not None:
        chosen["since"] = render.when(filters.since)
    return (
        _environment()
        .get_template("history.html.j2")
        .render(
            series=shown,
            alerts=trends.alerts(series, (trends.REGRESSION, trends.SUSPICIOUS)),
            chosen=chosen,
            options=options,
            colours=COLOURS,
            made=render.when(time.time()),
            uncharted=max(len(series) - MAX_CHARTS, 0),
            node_column=render.NODE_COLUMN,
        )
    )


def write_page(
    path: Path,
    series: dict[str, list[trends.Point]],
    filters: trends.Filters,
    options: trends.Options,
) -> Path:
    """Write the page atomically; only a milarun page is ever replaced."""
    return html.write_html(path, page_html(series, filters, options))
