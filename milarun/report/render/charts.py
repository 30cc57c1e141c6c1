"""The HTML report's charts, drawn with matplotlib to inline SVG: the overview of every test
and one small rate-over-time chart per test (its runs overlaid, the steady window shaded).
Drawing only: every figure plotted comes from the Report (milarun.report.build)."""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import matplotlib
import matplotlib.ticker
from markupsafe import Markup
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from milarun.report.build import Report
from milarun.report.runs import Series

# Above this many runs of one test, a chart shows each device's median run with a
# min-max band instead of one line per run (keeps the file small and readable); above
# MAX_BANDS devices (a fleet's 800 GPUs), one band of all runs, in grey.
MAX_LINES = 32
MAX_BANDS = 16
FLEET_GREY = "#555"
STEADY, STEADY_ALPHA = "#2ca02c", 0.16  # the shaded steady window
# Colours of the perf-ratio classes (html.ratio_class), and of a test not measured alike.
RATIO_COLOURS = {"good": "#3a3", "ok": "#aa3", "warn": "#f80", "bad": "#e22", "": "#bbb"}
NO_METADATA = dict.fromkeys(("Creator", "Date", "Format", "Type"))
RATIO_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 50, 100)
# matplotlib styles (its stubs type the keys as literals; Any keeps these dicts passable)
SMALL: dict[Any, Any] = {"font.size": 7.5, "svg.fonttype": "none", "svg.hashsalt": "milarun"}
LARGE: dict[Any, Any] = {**SMALL, "font.size": 9}


def svg(fig: Figure, style: dict[Any, Any] = SMALL) -> Markup:
    buf = io.StringIO()
    with matplotlib.rc_context(style):
        # no metadata block (its date made every page differ): the same report, the same file
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata=NO_METADATA)
    text = buf.getvalue()
    # Inline SVG: drop the XML prologue and DOCTYPE; matplotlib escapes the text it draws.
    return Markup(text[text.index("<svg") :])


def palette(devices: Iterable[str]) -> dict[str, str]:
    """A colour per device, the same in every chart (tab10, tab20 past ten devices)."""
    names = list(devices)
    colours = matplotlib.colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {d: to_hex(colours(i % colours.N)) for i, d in enumerate(names)}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def overview(report: Report, classes: Mapping[str, str]) -> Markup | None:
    """One row per test: its perf / the baseline's (when compared; log scale, coloured as
    the table's ratios, grey when not measured alike) and how steady it was measured (the
    steady window's cv, the run-to-run std). ``classes``: each test's ratio class."""
    table = report.table
    if table.empty:
        return None
    tests = [str(t) for t in table.index]
    ratios = report.has_baseline and "perf_ratio" in table.columns
    with matplotlib.rc_context(LARGE):
        fig = Figure(figsize=(9.0 if ratios else 5.0, 0.9 + 0.22 * len(tests)))
        axes = fig.subplots(1, 2 if ratios else 1, sharey=True, squeeze=False)[0]
        ys = list(range(len(tests)))[::-1]
        if ratios:
            _ratio_panel(axes[0], report, tests, ys, classes)
        _spread_panel(axes[-1], report, tests, ys)
        axes[0].set_yticks(ys, tests)
        axes[0].set_ylim(-0.7, len(tests) - 0.3)
        fig.set_layout_engine("constrained")
        return svg(fig, LARGE)


def _ratio_panel(ax: Any, report: Report, tests: list[str], ys: list[int], classes: Any) -> None:
    values = [report.table.loc[t, "perf_ratio"] for t in tests]
    finite = [v for v in values if _finite(v) and v > 0]
    low = min([0.5, *(v / 1.25 for v in finite)])
    high = max([2.0, *(v * 1.25 for v in finite)])
    ax.set_xscale("log")
    ax.set_xlim(low, high)
    ax.axvline(1.0, color="#444", linewidth=0.8)
    for test, y, value in zip(tests, ys, values):
        if not (_finite(value) and value > 0):
            ax.text(1.0, y, "  no ratio", va="center", color="#888")
            continue
        colour = RATIO_COLOURS.get(classes.get(test, ""), "#bbb")
        ax.barh(y, value - 1.0, left=1.0, height=0.7, color=colour)
        ax.text(value, y, f" {value:.2f} ", va="center", ha="left" if value >= 1 else "right")
    ax.set_xlabel("perf / baseline perf (log scale; 1 = as fast)")
    ax.set_xticks([t for t in RATIO_TICKS if low <= t <= high], minor=False)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.grid(axis="x", alpha=0.3)


def _spread_panel(ax: Any, report: Report, tests: list[str], ys: list[int]) -> None:
    quality, table = report.quality, report.table
    top = 1.0
    for test, y in zip(tests, ys):
        row = table.loc[test]
        if not _finite(row["perf"]):
            ax.text(0, y, " failed", va="center", color="#e22", fontweight="bold")
            continue
        cv = quality.loc[test, "cv"] if test in quality.index else math.nan
        if _finite(cv):
            ax.barh(y, 100 * cv, height=0.7, color="#9ec1e6", label="_cv")
            top = max(top, 100 * cv)
        spread = row["std%"]
        if _finite(spread) and _finite(row["ci_low"]):  # no spread to show of a single run
            ax.plot([spread], [y], "D", color="#333", markersize=3.5, label="_std")
            top = max(top, spread)
    ax.set_xlim(0, top * 1.15)
    ax.set_xlabel("% of the rate: steady-window cv (bar), run-to-run std (dot)")
    ax.grid(axis="x", alpha=0.3)


def rate_chart(
    runs: Iterable[Series], colours: Mapping[str, str], perf: float, gid: str
) -> tuple[Markup, str] | None:
    """A small chart of examples/s over time for one test: a line per run coloured by its
    device, each distinct steady window shaded (SVG ids ``<gid>-<k>``), the test's perf
    dashed over the windows."""
    runs = list(runs)
    by_device: dict[str, list[Series]] = defaultdict(list)
    for series in runs:
        by_device[series.device].append(series)
    if not runs:
        return None
    with matplotlib.rc_context(SMALL):
        fig = Figure(figsize=(3.6, 1.9))
        ax = fig.subplots()
        windows = sorted({s.steady for s in runs if s.steady[1] > s.steady[0]})
        # runs of other lengths have other windows: together as dark as one where all overlap
        alpha = 1 - (1 - STEADY_ALPHA) ** (1 / max(len(windows), 1))
        for k, (start, stop) in enumerate(windows):
            span = ax.axvspan(start, stop, color=STEADY, alpha=alpha, linewidth=0)
            span.set_gid(f"{gid}-{k}")
        if len(by_device) > MAX_BANDS:
            _band(ax, runs, FLEET_GREY)
        else:
            for device, items in by_device.items():
                colour = colours.get(device, "#333")
                if len(runs) <= MAX_LINES:
                    for s in items:
                        xs = [s.slice * (i + 1) for i in range(len(s.rates))]
                        ax.plot(xs, s.rates, color=colour, linewidth=1, alpha=0.85)
                else:
                    _band(ax, items, colour)
        if windows and _finite(perf):
            lo, hi = min(w[0] for w in windows), max(w[1] for w in windows)
            ax.hlines(perf, lo, hi, colors="#222", linestyles="--", linewidth=0.9)
        top = max(max(s.rates) for s in runs)
        ax.set_ylim(0, top * 1.12 if top > 0 else 1)
        ax.set_xlim(0, None)
        ax.set_xlabel("seconds of training")
        ax.set_ylabel("examples/s")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_short_number))
        ax.grid(alpha=0.3)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        note = (
            f"{len(runs)} runs on {len(by_device)} devices: median and range of all runs"
            if len(by_device) > MAX_BANDS
            else f"{len(runs)} run{'s' if len(runs) > 1 else ''}"
            if len(runs) <= MAX_LINES
            else f"{len(runs)} runs: median and range per device"
        )
        return svg(fig), note


def _short_number(value: float, _: Any = None) -> str:
    """Axis labels: 1.2M, 650k, 12.5 (no offset text such as 1e6 above the axis)."""
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _band(ax: Any, items: list[Series], colour: str) -> None:
    length = min(len(s.rates) for s in items)
    step = items[0].slice
    columns = [sorted(s.rates[i] for s in items) for i in range(length)]
    xs = [step * (i + 1) for i in range(length)]
    ax.fill_between(
        xs, [c[0] for c in columns], [c[-1] for c in columns], color=colour, alpha=0.2, linewidth=0
    )
    ax.plot(xs, [c[len(c) // 2] for c in columns], color=colour, linewidth=1)
