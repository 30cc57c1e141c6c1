"""What a result's ``throttle`` record means: the one classification of NVML's clock-event
reasons that the report, the tender, the history and the doctor share.

A GPU under load that runs at its power limit (``SwPowerCap``) is at its operating point:
an H100 or H200 in bf16 runs there by design. That is reported (the share of steady slices
at the limit, beside the median SM clock), never a fault. Thermal slowdowns (hardware or
software), the hardware slowdown and the power brake are faults: they slow a GPU below what
it should reach.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from milarun.machine.gpu import base
from milarun.results import steady
from milarun.results.records import Diagnostics
from milarun.results.schema import is_finite

POWER_LIMIT = "SwPowerCap"
FAULTS = frozenset({"HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown"})
REASON_TEXT = {
    POWER_LIMIT: "at its power limit",
    "HwSlowdown": "hardware slowdown",
    "SwThermalSlowdown": "thermal slowdown",
    "HwThermalSlowdown": "hardware thermal slowdown",
    "HwPowerBrakeSlowdown": "power brake",
}


# The device interface's clock-event bits (milarun.machine.gpu.base: NVML's
# nvmlClocksEventReason*, onto which AMD SMI's violation flags are mapped) that mean power or
# heat slowed the GPU, by name: the one map the energy record, the report, the tender and the
# doctor read. Idle (1), application clocks (2), sync boost (16) and the display clock (256)
# are not throttling.
BITS = {
    base.POWER_CAP: POWER_LIMIT,
    base.HW_SLOWDOWN: "HwSlowdown",
    base.SW_THERMAL: "SwThermalSlowdown",
    base.HW_THERMAL: "HwThermalSlowdown",
    base.POWER_BRAKE: "HwPowerBrakeSlowdown",
}
FAULT_BITS = sum(bit for bit, name in BITS.items() if name in FAULTS)  # a slowdown: a fault


def names(mask: int) -> list[str]:
    """The throttle reasons a clock-event mask holds, by name."""
    return [name for bit, name in BITS.items() if mask & bit]


def _count(value: Any) -> int:
    return int(value) if is_finite(value) and value >= 0 else 0


@dataclass(frozen=True)
class ThrottleView:
    """A throttle record read: steady slices in all, those slowed by a fault, those at the
    power limit, and the median SM clock (MHz) over the window where the record has it
    (records made before it was kept, and not upgraded from their samples: None)."""

    window_slices: int
    fault_slices: int
    power_limit_slices: int
    sm_clock_mhz: float | None = None


def _gpu_faults(gpu: Mapping[str, Any]) -> tuple[int, int]:
    """(fault slices, power-limit slices) of one GPU's entry. A record made
    before faults were counted apart has per-reason counts only: where power limit and
    faults both occur, the faults' union lies between their largest count and their sum
    (capped by the GPU's slices); the sum is taken, so a fault is never understated."""
    given = gpu.get("reasons")
    reasons: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    faults = [_count(c) for n, c in reasons.items() if n in FAULTS]
    power = _count(reasons.get(POWER_LIMIT))
    if "fault_slices" in gpu:
        return _count(gpu.get("fault_slices")), power
    if not any(faults):
        return 0, power
    hit = _count(gpu.get("slices"))
    return (hit if not power else min(hit, sum(faults))), power


def read(record: Any) -> ThrottleView | None:
    """A diagnostics' ``throttle`` record (any version), None where there is none."""
    if not isinstance(record, Mapping) or not isinstance(record.get("gpus"), Mapping):
        return None
    window = _count(record.get("window_slices"))
    fault = power = 0
    clocks = []
    for gpu in record["gpus"].values():
        if not isinstance(gpu, Mapping):
            continue
        f, p = _gpu_faults(gpu)
        fault, power = fault + f, max(power, p)
        if is_finite(gpu.get("sm_clock_mhz")):
            clocks.append(float(gpu["sm_clock_mhz"]))
    clock = statistics.median_high(clocks) if clocks else None
    return ThrottleView(window, min(fault, window), min(power, window), clock)


def flags(train: Diagnostics) -> list[str]:
    """A diagnostics' flags, ``throttle`` only for a fault (a result made before the power
    limit was told from a fault flagged both)."""
    found = read(train.throttle)
    at_limit_only = found is not None and not found.fault_slices
    return [str(f) for f in train.flags if not (f == "throttle" and at_limit_only)]


def add_sm_clocks(data: dict[str, Any], series_of: Callable[[], Any]) -> None:
    """The upgrade of a throttle record made before it kept each GPU's median SM clock over
    the steady window: read from the result's GPU monitor samples, while it has them
    (``series_of()``: its train rate series, series.RateSeries, made only where needed)."""
    train = ((data.get("diagnostics") or {}).get("train") or {}) if isinstance(data, dict) else {}
    record = train.get("throttle") if isinstance(train, dict) else None
    if not isinstance(record, dict) or not isinstance(record.get("gpus"), dict):
        return
    missing = [
        g for g, v in record["gpus"].items() if isinstance(v, dict) and "sm_clock_mhz" not in v
    ]
    monitor = data.get("gpu_monitor")
    samples = monitor.get("samples") if isinstance(monitor, dict) else None
    if not missing or not isinstance(samples, list):
        return
    series = series_of()
    window = steady.wall_clock_window(series) if series is not None else None
    if window is None:
        return
    start, end = window.spans[0][0], window.spans[-1][1]
    # the monitor keys a GPU by its CUDA_VISIBLE_DEVICES entry (a UUID under `jobs`)
    labels = {
        str(g.get("uuid") or g.get("id")): f"cuda:{g.get('id')}"
        for g in data.get("gpu_identity") or []
        if isinstance(g, dict)
    }
    clocks: dict[str, list[float]] = {}
    for sample in samples:
        gpus = sample.get("gpus") if isinstance(sample, dict) else None
        when: Any = sample.get("time") if isinstance(sample, dict) else None  # JSON
        if not isinstance(gpus, dict) or not is_finite(when) or not start <= when <= end:
            continue
        for gid, reading in gpus.items():
            clock: Any = reading.get("sm_clock") if isinstance(reading, dict) else None
            if is_finite(clock):
                label = labels.get(gid) or (
                    f"cuda:{gid}" if f"cuda:{gid}" in record["gpus"] else gid
                )
                clocks.setdefault(label, []).append(float(clock))
    only = next(iter(clocks.values())) if len(clocks) == 1 and len(record["gpus"]) == 1 else None
    for gpu in missing:
        found = clocks.get(gpu) or only
        record["gpus"][gpu] = {
            **record["gpus"][gpu],
            "sm_clock_mhz": statistics.median_high(found) if found else None,
        }
