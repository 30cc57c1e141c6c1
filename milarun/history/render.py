"""The history as text: per series, one line per point (formatting only; the verdicts are
milarun.history.trends')."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from milarun.history.trends import Point
from milarun.report.render import format as fmt

if TYPE_CHECKING:
    from milarun.history.machines import SideBySide  # pandas: only when it is made

HEADER = (
    f"{'when (UTC)':<16}  {'run':>5} {'round':>5}  {'rate':>12}  {'95% CI':>15}  "
    f"{'n':>3} {'fail':>4}  {'change':>7} {'p':>8}  verdict"
)


def rate_text(value: float | None, spec: str = ",.0f") -> str:
    """A rate with its thousands (three significant digits below 100); "-" for none."""
    if value is None:
        return "-"
    return format(value, spec) if abs(value) >= 100 else f"{value:.3g}"


def when(moment: float) -> str:
    return dt.datetime.fromtimestamp(moment, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def interval(point: Point) -> str:
    found, rate = point.interval, point.rate
    if found is None or not rate:
        return "-"
    low, high = found
    return f"{100 * (low / rate - 1):+.1f}/{100 * (high / rate - 1):+.1f}%"


def change(point: Point) -> str:
    return "-" if point.change is None else f"{100 * point.change:+.1f}%"


def p_value(point: Point) -> str:
    return fmt.p_value(point.p_value)


# An inference series' figures (its rate is output tokens/s): (column, database figure)
LATENCY_COLUMNS = (
    ("TTFT p50", "ttft_p50_ms"),
    ("p99 ms", "ttft_p99_ms"),
    ("TPOT p50", "tpot_p50_ms"),
    ("p99 ms", "tpot_p99_ms"),
    ("goodput", "goodput_percent"),
)


def latency_cells(point: Point) -> str:
    """An inference point's TTFT and TPOT p50/p99 (ms) and goodput (%), one cell each."""
    cells = []
    for title, name in LATENCY_COLUMNS:
        value = point.latency(name)
        text = "-" if value is None else f"{value:.0f}%" if name == "goodput_percent" else None
        cells.append(f"{text or fmt.sig(value):>{len(title)}}")
    return "  ".join(cells)


NODE_COLUMN = "node ex/J"  # examples per joule at the node's plug (a BMC), where measured


def point_line(point: Point, node: bool = False, served: bool = False) -> str:
    """One point; ``node``: with its node examples/J (its series has some); ``served``:
    with its latency figures (an inference series)."""
    per_joule = f"{fmt.sig(point.node_perf_per_watt):>9}  " if node else ""
    per_joule += f"{latency_cells(point)}  " if served else ""
    return (
        f"{when(point.when):<16}  {point.run_id:>5} {point.repeat:>5}  "
        f"{rate_text(point.rate):>12}  {interval(point):>15}  {len(point.instances):>3} "
        f"{point.failures:>4}  {change(point):>7} {p_value(point):>8}  {per_joule}"
        f"{point.verdict}" + (f"  ({'; '.join(point.notes)})" if point.notes else "")
    )


def history_text(series: dict[str, list[Point]]) -> str:
    if not series:
        return "no results in the database match\n"
    lines = []
    for name, points in series.items():
        node = any(p.node_perf_per_watt is not None for p in points)
        header = HEADER.replace("  verdict", f"  {NODE_COLUMN:>9}  verdict") if node else HEADER
        if any(i.inference for p in points for i in p.instances):  # an inference test
            header = header.replace("        rate", "tokens/s out")
        served = any(i.latency for p in points for i in p.instances)
        if served:
            titles = "  ".join(title for title, _ in LATENCY_COLUMNS)
            header = header.replace("  verdict", f"  {titles}  verdict")
        lines += ["", name, header]
        lines += [point_line(p, node, served) for p in points]
    counts: dict[str, int] = {}
    for points in series.values():
        for p in points:
            counts[p.verdict] = counts.get(p.verdict, 0) + 1
    lines += ["", "verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items()))]
    return "\n".join(lines[1:]) + "\n"


def alerts_text(found: Sequence[Point]) -> str:
    if not found:
        return "no alert\n"
    return (
        "\n".join(
            f"{p.verdict}: {p.series} run {p.run_id} round {p.repeat} "
            f"({when(p.when)} UTC): {rate_text(p.rate)}/s, {change(p)} vs its last "
            f"{p.baseline_points} point(s)" + (f"; {'; '.join(p.notes)}" if p.notes else "")
            for p in found
        )
        + "\n"
    )


def _cell(report: Any, test: str, compared: bool) -> str:
    table = report.table
    if test not in table.index:
        return "-"
    row = table.loc[test]
    perf, low, high = row["perf"], row["ci_low"], row["ci_high"]
    text = f"{rate_text(perf if math.isfinite(perf) else None)}"
    if math.isfinite(low) and math.isfinite(high) and perf > 0:
        text += f" {100 * (low / perf - 1):+.1f}/{100 * (high / perf - 1):+.1f}%"
    text += f" n={int(row['n'])}" + (f" fail={int(row['fail'])}" if row["fail"] else "")
    if compared and math.isfinite(row.get("perf_ratio", math.nan)):
        text += f" x{row['perf_ratio']:.2f} ({row['verdict']})"
    return text


def _score(report: Any, compared: bool) -> str:
    if report.score is None:
        return "-"
    text = f"{report.score:,.2f}"
    if report.score_ci:
        text += f" [{report.score_ci[0]:,.2f}, {report.score_ci[1]:,.2f}]"
    elif report.no_interval:  # a test that ran once: an interval of the others is not its
        text += f" ({report.no_interval})"
    if compared and report.ratio is not None:
        text += f" x{report.ratio:.2f}"
        if report.ratio_ci and all(map(math.isfinite, report.ratio_ci)):
            text += f" [{report.ratio_ci[0]:.2f}, {report.ratio_ci[1]:.2f}]"
    return text


def machines_text(found: SideBySide) -> str:
    """One row per test, one column per machine; ratios to the first machine."""
    first = found.columns[0]
    width = max([len(t) for t in found.tests] + [5])
    cells = [[c.label for c in found.columns]]
    cells += [
        [_cell(c.report, test, i > 0) for i, c in enumerate(found.columns)] for test in found.tests
    ]
    cells.append([_score(c.report, i > 0) for i, c in enumerate(found.columns)])
    widths = [max(len(row[i]) for row in cells) for i in range(len(found.columns))]
    names = ["", *found.tests, "score"]
    lines = [f"Machines side by side (ratios to {first.label}; 95% intervals)", ""]
    lines += [
        f"{name:<{width}}  " + "  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths))
        for name, row in zip(names, cells)
    ]
    weights = first.report.weights_source
    lines.append(f"\nscore: weighted geometric mean ({weights or 'no weights: unscored'})")
    for test, labels in sorted(found.unlike.items()):
        lines.append(f"not like with like: {test} on {', '.join(labels)}: other arguments or data")
    return "\n".join(line.rstrip() for line in lines) + "\n"
