"""The HTML report: one self-contained file (jinja2, autoescaped), charts as inline SVG."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from milarun import errors, results
from milarun.errors import HtmlPathError
from milarun.report.about import natural_key
from milarun.report.build import Report
from milarun.report.render import charts as render_charts
from milarun.report.render import format as fmt
from milarun.report.render import inference as render_inference
from milarun.report.render import nodes as render_nodes
from milarun.report.render import runs as render_runs
from milarun.report.render import text as render
from milarun.report.summary import BASELINE_DIR
from milarun.report.weights import WEIGHTS_DIR

TEMPLATES = Path(__file__).parents[2] / "templates"
HEADERS = {"perf_per_watt": "perf/W"}  # the tests table's columns named as the text names them


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
    """The tests table's rows; a comparability note numbered (note_no), listed below it."""
    rows = []
    notes = 0
    busy = {t.test for t in report.busy.tests}
    for test, row in report.table.iterrows():
        data = {k: row[k] for k in report.table.columns}
        data["test"] = test
        data["busy"] = test in busy
        data["ci95"] = fmt.ci(row)
        data["note_no"] = None
        if isinstance(data.get("comparable_note"), str) and data["comparable_note"]:
            notes += 1
            data["note_no"] = notes
        rows.append(data)
    return rows


def breakable(name: str) -> Markup:
    """A column name that may wrap after its underscores (perf_ratio_adj)."""
    return Markup("_<wbr>").join(escape(part) for part in str(name).split("_"))


def _quality(report: Report) -> list[dict[str, Any]]:
    """The quality table's rows: each flag ("name:runs") apart, and the drift cell's class:
    red where the report judged the drift beyond 2% (its ``drift`` flag), grey where it
    did not judge it (``short-window``: the report's warnings say so)."""
    rows = []
    for test, q in report.quality.iterrows():
        flags = [f for f in str(q["flags"] or "").split(",") if f]
        names = {f.partition(":")[0] for f in flags}
        drift = "fail" if "drift" in names else "light" if "short-window" in names else ""
        rows.append({"test": test, "q": q, "flags": flags, "drift_class": drift})
    return rows


def _energy(report: Report) -> list[dict[str, Any]]:
    """The energy table's rows, with the GPU's operating point from the quality table."""
    quality = report.quality
    rows = []
    for test, e in report.energy.table.iterrows():
        q = quality.loc[test] if test in quality.index else {}
        rows.append(
            {
                "test": test,
                "e": e,
                "sm_clock": q.get("sm_clock", math.nan),
                "power_limit": q.get("power_limit", math.nan),
            }
        )
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
    env.filters["si"] = fmt.si
    env.filters["p_text"] = fmt.p_text
    env.filters["p_value"] = fmt.p_value
    env.filters["breakable"] = breakable
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
            headers=HEADERS,
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
            weights=fmt.file_shown(report.weights_source, report.source, WEIGHTS_DIR),
            baseline=fmt.file_shown(report.baseline_source, report.source, BASELINE_DIR),
            quality=_quality(report),
            energy=_energy(report),
            inference=render_inference.html_rows(report),
            inference_note=" ".join(render_inference.NOTE),
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
