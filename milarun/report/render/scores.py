"""The Scores block of a report (text, and the HTML page's Scores table): failure rate, score
with its interval (or why it has none) and coverage, ratio, price, energy; a busy mark beside
a figure made of busy tests' rates."""

from __future__ import annotations

import textwrap

from milarun.report import busy as report_busy
from milarun.report.build import Report
from milarun.report.render import energy as render_energy
from milarun.report.render import format as fmt


def _busy(report: Report, tests: list[str] | None = None) -> str:
    mark = report_busy.mark(report.busy, report.scored if tests is None else tests)
    return f"  [{mark}]" if mark else ""


def score_lines(report: Report) -> list[str]:
    """The Scores block: failure rate, score with CI and coverage, ratio, price."""
    verdict = "PASS" if report.passed else "FAIL"
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(report.failure_kinds.items()))
    lines = [
        (
            "Failure rate",
            f"{report.failure_rate:12.2%} ({verdict})  "
            f"{report.failures} of {report.runs} runs" + (f": {kinds}" if kinds else ""),
        )
    ]
    if report.interrupted:
        lines.append(
            (
                "Interrupted",
                f"{report.interrupted:12,d}  run(s) stopped by the operator (Ctrl-C, a signal): "
                "not counted",
            )
        )
    if report.weights_source is not None:
        coverage = f"(coverage {(report.coverage or 0):.0%})"
        if report.score is not None:
            lines.append(("Score", f"{report.score:12,.2f}  {coverage}" + _busy(report)))
            if report.score_ci:
                low, high = report.score_ci
                lines.append(("Score 95% CI", f"{low:12,.2f} to {high:,.2f}"))
            elif report.no_interval:
                lines.append(("Score 95% CI", f"{'-':>12}  {report.no_interval}"))
        else:
            lines.append(("Score", f"{'-':>12}  {coverage}: no scored test"))
        lines.append(
            ("Tests scored", f"{len(report.scored):12d}  of {report.weighted_tests} weighted tests")
        )
        if report.missing:
            lines.append(("Missing", f"{len(report.missing):12d}  " + ", ".join(report.missing)))
    if report.unlike:
        lines.append(("Not compared", f"{len(report.unlike):12d}  different workloads"))
    if report.score_base is not None:
        lines.append(
            (
                "Score (baseline)",
                f"{report.score_base:12,.2f}  over {len(report.common)} test(s) measured alike",
            )
        )
        text = f"{report.ratio:12.3f}"
        once = [t for t in report.common if t in report.ran_once]
        if report.ratio_ci:
            text += (
                f"  95% CI {report.ratio_ci[0]:.3f} to {report.ratio_ci[1]:.3f}: "
                f"{report.ratio_verdict}"
            )
        elif once:
            text += f"  no interval: {len(once)} of {len(report.common)} tests ran once"
        lines.append(("Ratio", text + _busy(report, report.common)))
    if report.price is not None:
        lines.append(("Price ($)", f"{report.price:12,.2f}"))
        rpp = report.price_per_score
        lines.append(("RPP (Price / Score)", f"{fmt.plain(rpp, 4):>12}"))
    lines += render_energy.score_lines(report)
    width = max(len(k) for k, _ in lines) + 2
    # Long lists (missing tests) wrap under their value so the block fits fmt.WIDTH columns.
    return [
        textwrap.fill(
            f"{k + ':':{width}} {v}",
            fmt.WIDTH,
            subsequent_indent=" " * (width + 15),
            break_on_hyphens=False,
            break_long_words=False,
        )
        for k, v in lines
    ]
