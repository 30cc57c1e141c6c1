"""The history as text: per series, one line per point (formatting only; the verdicts are
milarun.history.trends')."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from milarun.history.trends import Point

HEADER = (
    f"{'when (UTC)':<16}  {'run':>5} {'round':>5}  {'rate':>12}  {'95% CI':>15}  "
    f"{'n':>3} {'fail':>4}  {'change':>7} {'p':>8}  verdict"
)


def number(value: float | None, spec: str = ",.0f") -> str:
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


def point_line(point: Point) -> str:
    return (
        f"{when(point.when):<16}  {point.run_id:>5} {point.repeat:>5}  "
        f"{number(point.rate):>12}  {interval(point):>15}  {len(point.instances):>3} "
        f"{point.failures:>4}  {change(point):>7} {'-' if point.p_value is None else format(point.p_value, '.2g'):>8}  "
        f"{point.verdict}" + (f"  ({'; '.join(point.notes)})" if point.notes else "")
    )


def history_text(series: dict[str, list[Point]]) -> str:
    if not series:
        return "no results in the database match\n"
    lines = []
    for name, points in series.items():
        lines += ["", name, HEADER]
        lines += [point_line(p) for p in points]
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
            f"({when(p.when)} UTC): {number(p.rate)}/s, {change(p)} vs its last "
            f"{p.baseline_points} point(s)" + (f"; {'; '.join(p.notes)}" if p.notes else "")
            for p in found
        )
        + "\n"
    )
