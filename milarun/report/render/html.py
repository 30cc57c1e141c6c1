"""The HTML report: one self-contained file (jinja2, autoescaped), charts as inline SVG."""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jinja2
import matplotlib
from markupsafe import Markup
from matplotlib.figure import Figure

from milarun import errors, results
from milarun.errors import HtmlPathError
from milarun.report.build import Report
from milarun.report.render import format as fmt
from milarun.report.render import nodes as render_nodes
from milarun.report.render import text as render
from milarun.report.runs import Series

TEMPLATES = Path(__file__).parents[2] / "templates"
# Above this many runs of one test, a chart shows each device's median run with a
# min-max band instead of one line per run (keeps the file small and readable).
MAX_LINES = 32


def ratio_class(value: float | None) -> str:
    """Colour rule for perf ratios: >=1.1 good, >=0.9 ok, >=0.75 warn, else bad."""
    if value is None or not math.isfinite(value):
        return ""
    return "good" if value >= 1.1 else "ok" if value >= 0.9 else "warn" if value >= 0.75 else "bad"


def gpu_class(value: float) -> str:
    """Colour rule for a device's fraction of the best device: >=0.9/0.8/0.7."""
    if not math.isfinite(value):
        return ""
    return "good" if value >= 0.9 else "ok" if value >= 0.8 else "warn" if value >= 0.7 else "bad"


def _svg(fig: Figure) -> Markup:
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    # Inline SVG: drop the XML prologue and DOCTYPE; matplotlib escapes the text it draws.
    return Markup(text[text.index("<svg") :])


def rate_chart(runs: Iterable[Series]) -> tuple[Markup, str] | None:
    """examples/s over time for one test: a line per instance, coloured by device."""
    by_device: dict[str, list[tuple[tuple[float, ...], float]]] = defaultdict(list)
    for series in runs:
        by_device[series.device].append((series.rates, series.slice))
    if not by_device:
        return None
    count = sum(len(v) for v in by_device.values())
    fig = Figure(figsize=(7.5, 2.6))
    ax = fig.subplots()
    colours = matplotlib.colormaps["tab10"]
    for index, (device, items) in enumerate(sorted(by_device.items())):
        colour = colours(index % 10)
        if count <= MAX_LINES:
            for k, (rates, step) in enumerate(items):
                ax.plot(
                    [step * (i + 1) for i in range(len(rates))],
                    rates,
                    color=colour,
                    linewidth=1,
                    alpha=0.85,
                    label=device if k == 0 else None,
                )
        else:
            _band(ax, items, colour, device)
    ax.set_xlabel("seconds of training")
    ax.set_ylabel("examples/s")
    top = max(max(r) for items in by_device.values() for r, _ in items)
    ax.set_ylim(0, top * 1.1 if top > 0 else 1)
    ax.grid(alpha=0.3)
    if len(by_device) <= 16:
        ax.legend(fontsize="small", loc="lower right", ncol=min(len(by_device), 8))
    note = (
        f"one line per run ({count} runs)"
        if count <= MAX_LINES
        else f"{count} runs: each device's median run, band from its slowest to its fastest"
    )
    return _svg(fig), note


def _band(ax: Any, items: list[tuple[tuple[float, ...], float]], colour: Any, label: str) -> None:
    length = min(len(r) for r, _ in items)
    step = items[0][1]
    columns = [sorted(r[i] for r, _ in items) for i in range(length)]
    xs = [step * (i + 1) for i in range(length)]
    ax.fill_between(
        xs, [c[0] for c in columns], [c[-1] for c in columns], color=colour, alpha=0.2, linewidth=0
    )
    ax.plot(xs, [c[len(c) // 2] for c in columns], color=colour, linewidth=1, label=label)


def _rows(report: Report) -> list[dict[str, Any]]:
    rows = []
    for test, row in report.table.iterrows():
        data = {k: row[k] for k in report.table.columns}
        data["test"] = test
        data["ci95"] = fmt.ci(row)
        rows.append(data)
    return rows


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = fmt.num
    env.filters["count"] = fmt.count
    env.filters["ratio_class"] = ratio_class
    env.filters["gpu_class"] = gpu_class
    env.filters["sig"] = fmt.sig
    env.filters["flag_text"] = render_nodes.flag_text
    return env


def to_html(report: Report) -> str:
    """The whole report page (charts drawn from the report's rate series)."""
    charts = []
    for test, runs in report.series.items():
        chart = rate_chart(runs)
        if chart:
            charts.append({"test": test, "svg": chart[0], "note": chart[1]})
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            report=report,
            rows=_rows(report),
            columns=list(report.table.columns),
            score_lines=render.score_lines(report),
            charts=charts,
            failures=report.failed_runs,
            isolation=report.isolation,
            systems=report.systems,
            skipped=report.skipped,
            source=report.source,
            nodes=report.nodes,
            explain_flags=render_nodes.explain(),
        )
    )


MARKER = "<!-- milarun report -->"


def check_html_path(path: Path) -> None:
    path = Path(path)
    if path.is_dir():
        raise HtmlPathError(f"--html {path}: is a folder; give a file name such as report.html")
    if path.exists():
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
        if MARKER not in head:
            raise HtmlPathError(
                f"--html {path}: exists and is not a milarun report; choose another file name"
            )


def write_html(path: Path, text: str) -> Path:
    """Write the page atomically; only an older milarun report is ever replaced."""
    path = Path(path)
    check_html_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise errors.WriteError(f"{path.parent}: cannot create ({err.strerror or err})") from None
    return results.write_text_atomic(path, text, replace=True)
