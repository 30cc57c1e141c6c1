"""The HTML report: one self-contained file (jinja2, autoescaped), charts as inline SVG."""

from __future__ import annotations

import io
import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable

import jinja2
import matplotlib
from markupsafe import Markup
from matplotlib.figure import Figure

from milarun import results
from milarun.machine import isolation
from milarun.report import nodes as report_nodes, summary
from milarun.report.render import text as render, nodes as render_nodes
from milarun.report.build import Report
from milarun import errors
from milarun.report.render import format as fmt
from milarun.errors import HtmlPathError

TEMPLATES = Path(__file__).parents[2] / "templates"
# Above this many runs of one test, a chart shows each device's median run with a
# min-max band instead of one line per run (keeps the file small and readable).
MAX_LINES = 32
ERROR_TAIL_LINES = 30


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


def _series(result: dict[str, Any]) -> tuple[list[float], float] | None:
    """The run's rate per slice (ranks of a distributed run added up) and slice length."""
    timings = result.get("timings") or {}
    ranks = [v for k, v in timings.items() if k.startswith("train_") and k[6:].isdigit()]
    timers = ranks or ([timings["train"]] if isinstance(timings.get("train"), dict) else [])
    rates = [t.get("rates") or [] for t in timers if isinstance(t, dict)]
    if not rates or not all(rates):
        return None
    length = min(len(r) for r in rates)
    total = [sum((r[i] or 0.0) for r in rates) for i in range(length)]
    return total, float(timers[0].get("slice") or 0.5)


def _svg(fig: Figure) -> Markup:
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    # Inline SVG: drop the XML prologue and DOCTYPE; matplotlib escapes the text it draws.
    return Markup(text[text.index("<svg"):])


def rate_chart(runs: list[dict[str, Any]],
               many_nodes: bool = False) -> tuple[Markup, str] | None:
    """examples/s over time for one test: a line per instance, coloured by device."""
    by_device: dict[str, list[tuple[list[float], float]]] = defaultdict(list)
    for run in runs:
        series = _series(run)
        if series:
            by_device[summary.node_device(run, many_nodes)].append(series)
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
                ax.plot([step * (i + 1) for i in range(len(rates))], rates, color=colour,
                        linewidth=1, alpha=0.85, label=device if k == 0 else None)
        else:
            _band(ax, items, colour, device)
    ax.set_xlabel("seconds of training")
    ax.set_ylabel("examples/s")
    top = max(max(r) for items in by_device.values() for r, _ in items)
    ax.set_ylim(0, top * 1.1 if top > 0 else 1)
    ax.grid(alpha=0.3)
    if len(by_device) <= 16:
        ax.legend(fontsize="small", loc="lower right", ncol=min(len(by_device), 8))
    note = (f"one line per run ({count} runs)" if count <= MAX_LINES else
            f"{count} runs: each device's median run, band from its slowest to its fastest")
    return _svg(fig), note


def _band(ax: Any, items: list[tuple[list[float], float]], colour: Any, label: str) -> None:
    length = min(len(r) for r, _ in items)
    step = items[0][1]
    columns = [sorted(r[i] for r, _ in items) for i in range(length)]
    xs = [step * (i + 1) for i in range(length)]
    ax.fill_between(xs, [c[0] for c in columns], [c[-1] for c in columns], color=colour,
                    alpha=0.2, linewidth=0)
    ax.plot(xs, [c[len(c) // 2] for c in columns], color=colour, linewidth=1, label=label)


def _failures(loaded: summary.Loaded | None, many_nodes: bool) -> list[dict[str, Any]]:
    rows = []
    for result, path in zip(loaded.results, loaded.paths) if loaded else ():
        if summary.run_rate(result) is not None:
            continue
        failure = result.get("failure") or {}
        error = str(result.get("error") or failure.get("message") or "")
        rows.append({
            "test": result.get("name"), "job_id": result.get("job_id"),
            "device": summary.node_device(result, many_nodes), "kind": summary.failure_kind(result),
            "message": failure.get("message") or "", "file": path.name,
            "tail": "\n".join(error.splitlines()[-ERROR_TAIL_LINES:]),
        })
    return rows


def _cpus(cpus: Iterable[int] | None) -> str:
    """0,1,2,3,8 -> 0-3,8; "-" when the result does not say."""
    return isolation.cpu_list(sorted(set(cpus or []))) or "-"


def _isolation(results_: list[dict[str, Any]], many_nodes: bool) -> list[dict[str, Any]]:
    """The isolation each instance got, one row per distinct setting with its run count."""
    counts: Counter[tuple[str, ...]] = Counter()
    for result in results_:
        iso = result.get("isolation") or {}
        groups = iso.get("cgroups") or {}
        limit = iso.get("memory_limit")
        key = (
            summary.node_device(result, many_nodes), _cpus(iso.get("cpus")),
            f"{limit / 2**30:.1f} GiB" if isinstance(limit, (int, float)) else "none",
            str(groups.get("cpuset", "-")), str(groups.get("memory", "-")),
            str(iso.get("torch_threads", "-")),
        )
        counts[key] += 1
    names = ("device", "cpus", "memory_limit", "cpuset", "memory", "threads")
    return [dict(zip(names, key), runs=n) for key, n in sorted(counts.items())]


def _systems(results_: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Each distinct system record, flattened to key -> text."""
    seen: dict[str, dict[str, str]] = {}
    for result in results_:
        record = result.get("system") or {}
        key = json.dumps(record, sort_keys=True, default=str)
        if key not in seen:
            seen[key] = {k: (json.dumps(v) if isinstance(v, (dict, list)) else str(v))
                         for k, v in record.items()}
    return list(seen.values())


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
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["num"] = fmt.num
    env.filters["count"] = fmt.count
    env.filters["ratio_class"] = ratio_class
    env.filters["gpu_class"] = gpu_class
    env.filters["sig"] = fmt.sig
    env.filters["flag_text"] = render_nodes.flag_text
    return env


def to_html(report: Report, loaded: summary.Loaded | None = None) -> str:
    """The whole report page; charts, failures and systems need the result files."""
    by_test: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for result in loaded.results if loaded else ():
        by_test[str(result["name"])].append(result)
    charts = []
    many_nodes = summary.spans_nodes(loaded.results if loaded else [])
    for test in sorted(by_test):
        chart = rate_chart(by_test[test], many_nodes)
        if chart:
            charts.append({"test": test, "svg": chart[0], "note": chart[1]})
    all_results = loaded.results if loaded else []
    return _environment().get_template("report.html.j2").render(
        report=report, rows=_rows(report), columns=list(report.table.columns),
        score_lines=render.score_lines(report), charts=charts,
        failures=_failures(loaded, many_nodes), isolation=_isolation(all_results, many_nodes),
        systems=_systems(all_results), skipped=loaded.skipped if loaded else [],
        source=str(loaded.root) if loaded else None,
        # the per-node section: --compare-nodes, or results from more than one node
        nodes=report.nodes or report_nodes.section(report.test_weights, loaded),
        explain_flags=render_nodes.explain(),
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
            raise HtmlPathError(f"--html {path}: exists and is not a milarun report; "
                                "choose another file name")


def write_html(path: Path, text: str) -> Path:
    """Write the page atomically; only an older milarun report is ever replaced."""
    path = Path(path)
    check_html_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise errors.WriteError(f"{path.parent}: cannot create ({err.strerror or err})")
    return results.write_text_atomic(path, text, replace=True)

