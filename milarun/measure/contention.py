"""Was the machine busy? The share of this run's CPUs that other processes took over its
steady window, from the CPU monitor's cumulative counters (milarun.machine.devices
``cpu_monitor``): busy time of the CPUs this process may use (steal included: a host that
takes a VM's CPU slows it too), minus this process tree's own CPU time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from milarun import results
from milarun.machine import monitors
from milarun.results import steady
from milarun.results.records import Contention

BUSY_LIMIT = 0.25  # others took a quarter of our CPUs: the rate may be low
MIN_SPAN = 2.0  # seconds between the two samples the share is taken from


def _counters(sample: Mapping[str, Any]) -> tuple[float, float, float] | None:
    values = (sample.get("time"), sample.get("cpus_busy_s"), sample.get("own_cpu_s"))
    return values if all(results.is_finite(v) for v in values) else None  # type: ignore[return-value]


def contention_record(record: Any, monitor: Mapping[str, Any] | None) -> Contention | None:
    """Others' share of our CPUs between the first and last CPU samples inside the rate
    record's steady window; None without a window or two such samples."""
    window = steady.wall_clock_window(record) if hasattr(record, "slice_ends") else None
    samples = (monitor or {}).get("samples") or []
    if window is None or not samples:
        return None
    start, end = window.spans[0][0], window.spans[-1][1]
    inside = [(s, c) for s in samples if (c := _counters(s)) and start <= c[0] <= end]
    if len(inside) < 2:
        return None
    a, (last, b) = inside[0][1], inside[-1]
    span = b[0] - a[0]
    cpus = last.get("cpus")
    if span < MIN_SPAN or not (isinstance(cpus, int) and cpus > 0):
        return None
    others = monitors.others_share(cpus, span, b[1] - a[1], b[2] - a[2])
    loads = [s["load1"] for s, _ in inside if results.is_finite(s.get("load1"))]
    return Contention(others, cpus, max(loads) if loads else None, span)


def with_contention(diag: Any, record: Any, monitor: Mapping[str, Any] | None) -> Any:
    """A diagnostics.Diagnostics with its ``contention`` entry, flagged ``busy`` past the limit."""
    found = contention_record(record, monitor)
    flags = diag.flags + (("busy",) if found and found.others >= BUSY_LIMIT else ())
    return replace(diag, contention=found, flags=flags)
