"""Energy per example and throttling over a run's steady window (DESIGN section 5).

The GPU monitor (monitors.gpu_monitor) samples each GPU's energy counter (J since the driver
loaded), power (W) and clock-event reasons, with the wall-clock time of the readings; the
rate log (experiment.RateLog) records the wall-clock time at which each slice closed. Here
the steady window (steady.slices) is mapped onto those samples:

- energy: the counter's difference between the window's wall-clock start and end, each
  interpolated linearly between the samples around it; a GPU without the counter gets its
  power samples integrated instead (trapezoids of the piecewise-linear power);
- throttling: a window slice that overlaps a sample whose reasons hold a power or thermal
  slowdown is flagged; a sample stands for the time nearer to it than to its neighbours.

The runner builds the records; the report aggregates them (milarun.report.energy). No torch and
no pandas here.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from milarun import results
from milarun.results import series, steady, throttle
from milarun.results.records import Energy

NO_GPU = "no GPU: CPU energy is not measured"


def with_board_power(found: Energy, gpus: Sequence[tuple[float | None, float | None]]) -> Energy:
    """``found`` with its GPUs' (board power, enforced limit) summed: each sum only where
    every GPU has its figure."""
    boards = [b for b, _ in gpus if b is not None]
    limits = [lim for _, lim in gpus if lim is not None]
    return replace(
        found,
        board_power_w=math.fsum(boards) if gpus and len(boards) == len(gpus) else None,
        power_limit_w=math.fsum(limits) if gpus and len(limits) == len(gpus) else None,
    )


@dataclass(frozen=True)
class Throttle:
    """Steady-window slices that overlap a throttled GPU sample: a diagnostics' ``throttle``.
    ``slices``: those with any reason; ``fault_slices``: with a fault (results.throttle:
    a power limit is none); ``gpus``: every GPU judged, label -> the same counts, slices per
    reason name and the median SM clock (MHz) of its samples in the window."""

    slices: int
    window_slices: int
    gpus: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    fault_slices: int = 0
    power_limit_slices: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "slices": self.slices,
            "fault_slices": self.fault_slices,
            "power_limit_slices": self.power_limit_slices,
            "window_slices": self.window_slices,
            "gpus": {g: dict(v) for g, v in self.gpus.items()},
        }


def gpu_label(gid: str, labels: Mapping[str, str] | None = None) -> str:
    """A monitor's GPU id (a CUDA_VISIBLE_DEVICES entry) as the operator named it."""
    return (labels or {}).get(gid) or f"cuda:{gid}"


def _series(samples: Sequence[Any], gid: str, key: str) -> list[tuple[float, float]]:
    """(wall time, reading) of one GPU, sorted, readings that are numbers only."""
    out = []
    for sample in samples:
        if not isinstance(sample, dict) or not isinstance(sample.get("gpus"), dict):
            continue
        # JSON values: is_finite below tells the numbers
        when: Any = sample.get("time")
        reading = sample["gpus"].get(gid)
        value: Any = reading.get(key) if isinstance(reading, dict) else None
        if results.is_finite(when) and results.is_finite(value):
            out.append((float(when), float(value)))
    return sorted(out)


def value_at(series: list[tuple[float, float]], when: float) -> float | None:
    """The reading at ``when``, linear between the samples around it; None outside them."""
    k = bisect.bisect_left(series, (when, -math.inf))
    if k < len(series) and series[k][0] == when:
        return series[k][1]
    if k == 0 or k == len(series):
        return None
    (ta, va), (tb, vb) = series[k - 1], series[k]
    return va + (vb - va) * (when - ta) / (tb - ta)


def integrate(series: list[tuple[float, float]], start: float, end: float) -> float | None:
    """The integral over [start, end] of the piecewise-linear function through the samples
    (trapezoids); None when the samples do not cover the interval."""
    first, last = value_at(series, start), value_at(series, end)
    if first is None or last is None:
        return None
    points = [(start, first)] + [p for p in series if start < p[0] < end] + [(end, last)]
    return math.fsum((tb - ta) * (va + vb) / 2 for (ta, va), (tb, vb) in zip(points, points[1:]))


def gpu_energy(
    samples: Sequence[Any], gid: str, start: float, end: float
) -> tuple[float, str] | None:
    """Joules one GPU used over [start, end] and how they were found: the counter where the
    GPU has one (and it did not restart), else its power integrated; None if neither."""
    counter = _series(samples, gid, "energy")
    first, last = value_at(counter, start), value_at(counter, end)
    if first is not None and last is not None and last >= first:
        return last - first, "counter"
    joules = integrate(_series(samples, gid, "power"), start, end)
    return (joules, "power") if joules is not None else None


def _gpus(samples: Sequence[Any]) -> list[str]:
    """The GPU ids the samples cover, in the monitor's order."""
    seen: dict[str, None] = {}
    for sample in samples:
        if isinstance(sample, dict) and isinstance(sample.get("gpus"), dict):
            seen.update(dict.fromkeys(map(str, sample["gpus"])))
    return list(seen)


def energy_record(
    device: str,
    timings: Mapping[str, Any],
    monitor: Mapping[str, Any] | None,
    labels: Mapping[str, str] | None = None,
) -> Energy:
    """The energy of a run's steady window, from its rate records and GPU monitor record.

    A distributed run (``train_<rank>`` timings, only on rank 0) covers every GPU of the
    job, over rank 0's window, with each rank's examples at its own pace in that window.
    The record names the backend whose monitor measured (none: not measured).
    """
    found = _energy(device, timings, monitor, labels)
    backend = (monitor or {}).get("backend")
    return replace(found, backend=backend) if isinstance(backend, str) else found


def _energy(
    device: str,
    timings: Mapping[str, Any],
    monitor: Mapping[str, Any] | None,
    labels: Mapping[str, str] | None,
) -> Energy:
    if not device.startswith("cuda"):
        return Energy(reason=NO_GPU)
    samples = (monitor or {}).get("samples") or []
    gpus = _gpus(samples)
    if not gpus:
        return Energy(reason=(monitor or {}).get("note") or "no GPU monitor samples")
    names = tuple(gpu_label(gid, labels) for gid in gpus)
    ranks = series.rank_timers(timings)
    logs = ranks or [timings.get("train")]
    if len(ranks) > len(gpus):
        return Energy(
            gpus=names,
            reason=f"rank 0 sees {len(gpus)} of the job's "
            f"{len(ranks)} GPUs: the job's energy is not measured",
        )
    candidates = [
        steady.wall_clock_window(log) if hasattr(log, "slice_ends") else None for log in logs
    ]
    windows = [w for w in candidates if w is not None and w.end > w.start]
    if len(windows) < len(candidates):
        return Energy(gpus=names, reason="no steady window with slice times")
    main = windows[0]
    joules, methods = 0.0, set()
    for gid in gpus:
        found = gpu_energy(samples, gid, main.start, main.end)
        if found is None:
            return Energy(
                gpus=names,
                reason=f"{gpu_label(gid, labels)}: no energy "
                "counter or power samples around the steady window",
            )
        joules += found[0]
        methods.add(found[1])
    seconds = main.end - main.start
    examples = math.fsum(w.examples * seconds / (w.end - w.start) for w in windows)
    return Energy(
        joules=joules,
        seconds=seconds,
        watts=joules / seconds,
        examples=examples,
        joules_per_example=joules / examples if examples > 0 else None,
        examples_per_joule=examples / joules if joules > 0 else None,
        method="+".join(sorted(methods)),
        gpus=names,
    )


# -- throttling --------------------------------------------------------------------------
def _reasons(mask: int) -> list[str]:
    return throttle.names(mask)


def sample_spans(times: Sequence[float], interval: float) -> list[tuple[float, float]]:
    """The time each sample stands for: up to halfway to its neighbours (half the monitor
    interval beyond the first and the last)."""
    mids = [(a + b) / 2 for a, b in zip(times, times[1:])]
    return list(zip([times[0] - interval / 2] + mids, mids + [times[-1] + interval / 2]))


def throttle_record(
    record: Any, monitor: Mapping[str, Any] | None, labels: Mapping[str, str] | None = None
) -> Throttle | None:
    """Which steady-window slices of a rate record overlap a throttled sample, per GPU;
    None when there is no window or no sample has clock-event reasons."""
    window = steady.wall_clock_window(record) if hasattr(record, "slice_ends") else None
    samples = (monitor or {}).get("samples") or []
    given: Any = (monitor or {}).get("interval")  # JSON: is_finite tells a number
    interval = float(given) if results.is_finite(given) and given > 0 else 1.0
    if window is None:
        return None
    flagged: set[int] = set()
    faulty: set[int] = set()
    limited: set[int] = set()
    gpus = {}
    for gid in _gpus(samples):
        series = [(t, int(m)) for t, m in _series(samples, gid, "clock_events")]
        if not series:
            continue  # this GPU does not report clock-event reasons
        by_reason: dict[str, set[int]] = defaultdict(set)
        spans = sample_spans([t for t, _ in series], interval)
        for (_, mask), (a, b) in zip(series, spans):
            names = _reasons(mask)
            if names:
                for i, (s0, s1) in enumerate(window.spans):
                    if a < s1 and s0 < b:  # the sample's time overlaps the slice
                        for name in names:
                            by_reason[name].add(i)
        hit = set().union(*by_reason.values())
        fault = set().union(*(s for n, s in by_reason.items() if n in throttle.FAULTS))
        power = by_reason.get(throttle.POWER_LIMIT, set())
        flagged, faulty, limited = flagged | hit, faulty | fault, limited | power
        clocks = [
            c
            for t, c in _series(samples, gid, "sm_clock")
            if window.spans[0][0] <= t <= window.spans[-1][1]
        ]
        gpus[gpu_label(gid, labels)] = {
            "slices": len(hit),
            "fault_slices": len(fault),
            "power_limit_slices": len(power),
            "reasons": {n: len(s) for n, s in sorted(by_reason.items())},
            "sm_clock_mhz": statistics.median_high(clocks) if clocks else None,
        }
    if not gpus:
        return None
    return Throttle(len(flagged), len(window.spans), gpus, len(faulty), len(limited))


def with_throttle(
    diag: Any,
    record: Any,
    monitor: Mapping[str, Any] | None,
    labels: Mapping[str, str] | None = None,
) -> Any:
    """A diagnostics.Diagnostics with its ``throttle`` entry, flagged when a fault slowed a
    slice (running at the power limit is the GPU's operating point: recorded, not flagged)."""
    found = throttle_record(record, monitor, labels)
    flags = diag.flags + (("throttle",) if found and found.fault_slices else ())
    return replace(diag, throttle=found.to_dict() if found else None, flags=flags)


# -- summary (the baseline format's ``energy`` and ``throttle`` per test) ------------------
