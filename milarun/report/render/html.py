"""The HTML report: one self-contained file (jinja2, autoescaped), charts as inline SVG."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jinja2

from milarun import errors, results
from milarun.errors import HtmlPathError
from milarun.report.about import natural_key
from milarun.report.build import Report
from milarun.report.render import charts as render_charts
from milarun.report.render import format as fmt
from milarun.report.render import nodes as render_nodes
from milarun.report.render import runs as render_runs
from milarun.report.render import text as render

TEMPLATES = Path(__file__).parents[2] / "templates"


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


def _rows(report: Report) -> list[dict[str, Any]]:
    rows = []
    for test, row in report.table.iterrows():
        data = {k: row[k] for k in report.table.columns}
        data["test"] = test
        data["ci95"] = fmt.ci(row)
        rows.append(data)
    return rows


def environment() -> jinja2.Environment:
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


def _charts(report: Report, colours: dict[str, str]) -> list[dict[str, Any]]:
    """One small chart per test with a rate series, with its caption's figures."""
    out = []
    for n, (test, runs) in enumerate(report.series.items()):
        perf = report.table.loc[test, "perf"] if test in report.table.index else math.nan
        chart = render_charts.rate_chart(runs, colours, perf, f"steady-{n}")
        if chart:
            out.append({"test": test, "svg": chart[0], "note": chart[1], "perf": perf})
    return out


def _system_table(report: Report) -> tuple[list[str], list[dict[str, str]]]:
    """The System block as a table: its labels in order, one column per system record."""
    labels: dict[str, None] = {}
    for record in report.details.systems:
        labels.update(dict.fromkeys(record))
    return list(labels), list(report.details.systems)


def to_html(report: Report) -> str:
    """The whole report page (charts drawn from the report's figures)."""
    devices = sorted({s.device for runs in report.series.values() for s in runs}, key=natural_key)
    colours = render_charts.palette(devices)
    classes = {}
    if "perf_ratio" in report.table.columns:
        classes = {
            str(t): "" if r.get("comparable") == "no" else ratio_class(r["perf_ratio"])
            for t, r in report.table.iterrows()
        }
    labels, systems = _system_table(report)
    return (
        environment()
        .get_template("report.html.j2")
        .render(
            report=report,
            about=render_runs.about_rows(report),
            rows=_rows(report),
            columns=list(report.table.columns),
            score_lines=render.score_lines(report),
            overview=render_charts.overview(report, classes),
            charts=_charts(report, colours),
            # a legend of the device colours where the charts use them
            colours=colours if 1 < len(colours) <= render_charts.MAX_BANDS else {},
            failures=report.details.failed,
            isolation=report.details.isolation,
            system_labels=labels,
            systems=systems,
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
    if path.exists() and not path.is_file():  # a FIFO or /dev/stdout: reading it would hang
        raise HtmlPathError(
            f"--html {path}: is not a regular file (a pipe, a device?); give a file name such "
            "as report.html"
        )
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
    # a file name that is not UTF-8 (read as surrogates) shows as U+FFFD, never an error
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return results.write_text_atomic(path, text, replace=True)
