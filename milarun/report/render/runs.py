"""The runs part of a report (milarun.report.runs: failed runs, isolation, systems, rate
series) as text, plain data and CSV; the HTML page renders the same values."""

from __future__ import annotations

import dataclasses
import io
import textwrap
from typing import Any

from milarun.report.build import Report
from milarun.report.render import format as fmt

TEXT_TAIL_LINES = 8  # of each failed run's log in the text report (JSON and HTML: all kept)
CGROUP_WIDTH = 28  # cgroup paths cut in the middle in text (JSON, CSV and HTML: whole)


def _failed_text(report: Report) -> list[str]:
    if not report.details.failed:
        return []
    rows = {
        f"{fmt.short(f.test)} J{f.job_id}": {
            "device": f.device,
            "kind": f.kind,
            "message": textwrap.shorten(f.message, 60) or "-",
        }
        for f in report.details.failed
    }
    out = fmt.section("Failed runs") + [fmt.frame(rows, "run")]
    for f in report.details.failed:
        tail = f.tail.splitlines()[-TEXT_TAIL_LINES:]
        if tail:
            out += ["", f"{f.test} J{f.job_id} ({f.kind}), {f.file}, end of its log:"]
            out += [fmt.clip(f"  | {line}".rstrip()) for line in tail]
    return out


def _isolation_text(report: Report) -> list[str]:
    if not report.details.isolation:
        return []
    rows = {
        i.device: {
            "cpus": i.cpus,
            "memory limit": i.memory_limit,
            "cpuset": fmt.short(i.cpuset, CGROUP_WIDTH),
            "memory": fmt.short(i.memory, CGROUP_WIDTH),
            "threads": i.threads,
            "runs": str(i.runs),
        }
        for i in report.details.isolation
    }
    return fmt.section("Isolation each instance got (cgroups, CPUs, memory limit)") + [
        fmt.frame(rows, "device")
    ]


def _systems_text(report: Report) -> list[str]:
    out: list[str] = []
    for n, record in enumerate(report.details.systems, 1):
        title = (
            "System"
            if len(report.details.systems) == 1
            else f"System {n} of {len(report.details.systems)}"
        )
        out += fmt.section(title)
        width = max((len(k) for k in record), default=0) + 1
        out += [fmt.clip(f"{k + ':':{width}} {v}") for k, v in record.items()]
    return out


def about_rows(report: Report) -> list[tuple[str, str]]:
    """The header: when, where, on what and of which suite the runs ran (nothing from a
    summary file, which keeps none of it)."""
    about = report.details.about
    if about.finished is None and not about.hosts:
        return []
    devices = fmt.devices(about.devices)
    if about.gpus:
        devices += " (" + "; ".join(about.gpus) + ")"
    return [
        ("date", fmt.when(about.started, about.finished)),
        ("host" if len(about.hosts) <= 1 else "hosts", ", ".join(about.hosts) or "-"),
        ("devices", devices),
        ("suite", ", ".join(about.suites) or "-"),
    ]


def about_text(report: Report) -> list[str]:
    return [fmt.clip(f"{k + ':':9} {v}") for k, v in about_rows(report)]


def text_section(report: Report) -> list[str]:
    """The "Failed runs", "Isolation" and "System" blocks (nothing from a summary file)."""
    return _failed_text(report) + _isolation_text(report) + _systems_text(report)


def records(report: Report) -> dict[str, Any]:
    """The runs part as plain data (keys of the JSON report)."""
    return {
        "source": report.source,
        "failed_runs": [dataclasses.asdict(f) for f in report.details.failed],
        "isolation": [dataclasses.asdict(i) for i in report.details.isolation],
        "systems": list(report.details.systems),
        "about": dataclasses.asdict(report.details.about),
        "series": {
            test: [
                {
                    "device": s.device,
                    "slice": s.slice,
                    "rates": list(s.rates),
                    "steady": list(s.steady),
                }
                for s in runs
            ]
            for test, runs in report.series.items()
        },
        "skipped": [{"path": s.path, "reason": s.reason} for s in report.skipped],
    }


def csv_blocks(report: Report) -> str:
    """After the per-test table, a blank line and a header row each: the failed runs, then
    the isolation rows (only the blocks that have rows)."""
    import csv

    buf = io.StringIO()
    for rows in (report.details.failed, report.details.isolation):
        if not rows:
            continue
        buf.write("\n")
        writer = csv.DictWriter(
            buf, fieldnames=[f.name for f in dataclasses.fields(rows[0])], lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(dataclasses.asdict(r) for r in rows)
    return buf.getvalue()
