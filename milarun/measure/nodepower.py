"""The node's energy over a run's steady window, from the BMC monitor (milarun.machine.bmc):
the node, its GPUs and the rest of the node, and examples per joule at node level.

- energy: the BMC's energy counter where it has one fine enough (its step at most 5% of the
  window's energy), else the power readings integrated (trapezoids, measure.energy.integrate);
- too few readings (fewer than MIN_READINGS inside the window, or a gap between readings,
  or between an edge of the window and the reading nearest it, longer than MAX_GAP_SHARE of
  the window: a BMC that answers slowly or was reset) give no node figure and say so: no
  figure rather than a wrong one;
- several benchmark instances share the node at once (`milarun jobs` per-gpu, the count in
  INSTANCES_ENV): each is charged an equal share of the node's energy, and its GPUs' energy
  (the ``energy`` record) is taken from that share; the rest is the rest of the node. A share
  below the GPUs' own energy is no node reading: noted, no figure.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from milarun import results
from milarun.measure import energy as gpu_energy
from milarun.results import series, steady
from milarun.results.records import NodeEnergy

INSTANCES_ENV = "MILARUN_NODE_INSTANCES"  # set by `milarun jobs` (run.plan)
MIN_READINGS = 3
MAX_GAP_SHARE = 0.25  # of the window: no more than a quarter of it interpolated
COUNTER_STEP_SHARE = 0.05


def instances_on_node(environ: Mapping[str, str] | None = None) -> int:
    given = (os.environ if environ is None else environ).get(INSTANCES_ENV, "1")
    return int(given) if given.isdigit() and int(given) > 0 else 1


def _series(samples: Sequence[Any], key: str) -> list[tuple[float, float]]:
    out = []
    for sample in samples:
        node = sample.get("bmc") if isinstance(sample, dict) else None
        when: Any = sample.get("time") if isinstance(node, dict) else None
        value: Any = node.get(key) if isinstance(node, dict) else None
        if results.is_finite(when) and results.is_finite(value) and value >= 0:
            out.append((float(when), float(value)))
    return sorted(out)


def _counter_joules(counter: list[tuple[float, float]], start: float, end: float) -> float | None:
    """The counter's rise over the window when it is fine enough to measure it."""
    first, last = gpu_energy.value_at(counter, start), gpu_energy.value_at(counter, end)
    if first is None or last is None or last <= first:
        return None
    around = [v for t, v in counter if start <= t <= end]
    if len(around) < MIN_READINGS or any(b < a for a, b in zip(around, around[1:])):
        return None  # too few readings, or the counter restarted (a BMC reset)
    values = sorted({v for _, v in counter})
    step = min((b - a for a, b in zip(values, values[1:])), default=math.inf)
    return last - first if step <= COUNTER_STEP_SHARE * (last - first) else None


def node_energy_record(
    timings: Mapping[str, Any],
    monitor: Mapping[str, Any] | None,
    gpu: gpu_energy.Energy | None,
    instances: int | None = None,
) -> NodeEnergy | None:
    """The node's energy over the run's steady window (rank 0's under torchrun); None when
    no BMC is configured (the monitor has nothing to say)."""
    if not monitor or str(monitor.get("note", "")).startswith("no samples: no BMC configured"):
        return None
    count = instances_on_node() if instances is None else instances
    samples = monitor.get("samples") or []
    source = next((s.get("source") for s in reversed(samples) if isinstance(s, dict)), None)
    note = monitor.get("note")
    if not samples:
        return NodeEnergy(instances=count, reason=str(note or "no BMC readings"))
    logs = series.rank_timers(timings) or [timings.get("train")]
    found = steady.wall_clock_window(logs[0]) if hasattr(logs[0], "slice_ends") else None
    if found is None or found.end <= found.start:
        why = "no steady window with slice times"
        return NodeEnergy(instances=count, source=source, reason=why)
    start, end = found.start, found.end
    seconds = end - start
    power = _series(samples, "power")
    inside = [t for t, _ in power if start <= t <= end]
    joules = _counter_joules(_series(samples, "energy"), start, end)
    method = "counter"
    if joules is None:
        method = "power"
        # an edge of the window with no reading beyond it (the BMC's first answer came just
        # after the window began): the nearest reading stands for it, as a gap would be
        edge = MAX_GAP_SHARE * seconds
        if power and start < power[0][0] <= start + edge:
            power.insert(0, (start, power[0][1]))
        if power and end - edge <= power[-1][0] < end:
            power.append((end, power[-1][1]))
        times = [t for t, _ in power]
        lo = max((t for t in times if t <= start), default=None)
        hi = min((t for t in times if t >= end), default=None)
        covering = [t for t in times if lo is not None and hi is not None and lo <= t <= hi]
        gap = max((b - a for a, b in zip(covering, covering[1:])), default=math.inf)
        errors = "; ".join(map(str, monitor.get("errors") or []))
        if len(inside) < MIN_READINGS or gap > MAX_GAP_SHARE * seconds:
            gap_text = f", a gap of {gap:.1f} s" if math.isfinite(gap) else ""
            return NodeEnergy(
                seconds=seconds,
                instances=count,
                readings=len(inside),
                source=source,
                reason=f"too few BMC readings: {len(inside)} in the {seconds:.1f} s steady "
                f"window{gap_text} (at least {MIN_READINGS}, one every <= "
                f"{MAX_GAP_SHARE * seconds:.1f} s); no node figure"
                + (f" (BMC errors: {errors})" if errors else ""),
            )
        joules = gpu_energy.integrate(power, start, end)
        assert joules is not None  # lo and hi bracket the window
    share = joules / count
    gpu_joules = gpu.joules if gpu is not None and gpu.joules is not None else None
    examples = gpu.examples if gpu is not None and gpu.examples is not None else found.examples
    measured = NodeEnergy(
        joules,
        seconds,
        joules / seconds,
        count,
        share,
        gpu_joules,
        method=method,
        readings=len(inside),
        source=source,
    )
    if gpu_joules is not None and gpu_joules > share:
        return replace(
            measured,
            reason=f"the BMC's node energy ({share:,.0f} J for this instance's share) is below "
            f"its GPUs' own ({gpu_joules:,.0f} J): not a node reading; no node figure",
        )
    return replace(
        measured,
        rest_joules=share - gpu_joules if gpu_joules is not None else None,
        examples=examples,
        examples_per_joule=examples / share if share > 0 and examples else None,
    )
