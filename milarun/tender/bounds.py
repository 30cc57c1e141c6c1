"""The bounds of the ``evidence`` rule that a forger cannot move: each comes from milarun
(its datasheet, its FLOPs formulas and table, its code), never from the figure it bounds.

- FLOPs: a test's FLOPs per example is a function of the test and its arguments. milarun
  recomputes it (milarun.tender.flops) and a bid whose ``efficiency.flops_per_example``
  differs FAILs; the peak bound then uses milarun's figure.
- device: the device a result ran on is read from the run's system record (the ``.sysinfo``
  that ``jobs`` kept at the start of the run) and the result's own, and the GPU monitor's
  inventory (the name, UUID, memory size and PCI device id the backend gave of each GPU it
  sampled), never from ``efficiency``. An efficiency
  that names another device FAILs; a device with no datasheet row is bounded by nothing and
  the PASS line says so (a tender with ``unknown_device_fails`` FAILs it).
- energy: no result may do more FLOPs per joule than its device's dense peak at its board
  power, times ENERGY_MARGIN; and over the steady window the GPU must draw the power of a
  busy device (BUSY_POWER of its board power).

What remains possible: docs/tender-evidence.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from milarun.machine.gpu import datasheet
from milarun.results import is_finite, steady
from milarun.results.parts import gpu_names, number
from milarun.results.read import ResultView
from milarun.tender import flops

FLOPS_TOLERANCE = 0.02  # counted FLOPs move by <1% between torch releases (attention ops)
# A GPU does more FLOPs per joule below its board power than at it (a power-capped H100 at
# half its 700 W keeps ~60% of its GEMM rate: DVFS lowers the voltage with the clock), and
# a monitor's power reading is within +-5%: 1.5x the datasheet's peak per board watt is
# beyond any real device. The honest H100 GEMM does 0.95 TFLOP/J, the bound is 2.1.
ENERGY_MARGIN = 1.5
# Under a training step a GPU draws most of its board power (the H100 run: 576-701 W of
# 700 W over the steady windows); an idle one draws ~10%. Under 30%: not the work claimed.
BUSY_POWER = 0.3
# NVML's and AMD SMI's utilisation: the share of time a kernel ran. A training step keeps
# its GPU busy (the H100 and H200 runs: 0.93 to 1.0 over their steady windows); under half:
# the GPU waited for most of the window, not the device that did the work claimed.
BUSY_LOAD = 0.5
MEMORY_TOLERANCE = 0.02  # the monitor's and the system record's memory size, MiB


@dataclass(frozen=True)
class Device:
    """The device a result ran on, as milarun reads it, and why it could not (``why``)."""

    name: str | None
    row: str | None
    why: str | None = None
    pci_why: str | None = None  # why its PCI device id was not checked


def _n(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1e6 else f"{value:,.10g}"


def _system_gpus(system: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    gpus = system.get("gpus")
    return [g for g in gpus if isinstance(g, Mapping)] if isinstance(gpus, list) else []


def _used(view: ResultView, gpus: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The system record's entries of the GPUs the result used (by index), else all."""
    wanted = {str(d) for d in view.devices}
    found = [g for g in gpus if str(g.get("index")) in wanted]
    return found or gpus


def device_of(
    view: ResultView, file: str, machine: Mapping[str, Any] | None
) -> tuple[Device, list[str]]:
    """The result's device and the disagreements of its records: the result's system
    record, the run's (``machine``: the ``.sysinfo`` kept at the run's start), the monitor's
    inventory and ``efficiency.device_name``."""
    mine = _used(view, _system_gpus(view.system))
    names = sorted({str(g.get("name")) for g in mine if isinstance(g.get("name"), str)})
    run_system = machine.get("system") if isinstance(machine, Mapping) else None
    if isinstance(run_system, Mapping):
        theirs = gpu_names(run_system)
        if names and theirs and not set(names) <= theirs:
            return Device(None, None), [
                f"{file}: system.gpus names {', '.join(names)[:80]} but the run's system "
                f"record (.sysinfo) names {', '.join(sorted(theirs))[:80]}"
            ]
    if len(names) != 1:
        why = "no GPU in its system record" if not names else "GPUs of different models"
        return Device(None, None, why), []
    name = names[0]
    problems = _monitor_problems(view, file, mine, machine)
    eff = view.efficiency
    said = eff.device_name if eff is not None else None
    if isinstance(said, str) and said != name:
        problems.append(f"{file}: efficiency.device_name {said!r} but system.gpus names {name!r}")
    problems += _inventory_problems(view, file, name)
    row = datasheet.row_for(name)
    pci_why, pci_problems = _pci_problems(file, mine, run_system, row, _inventory(view))
    return (
        Device(name, row, None if row else f"unknown device {name}", pci_why),
        problems + pci_problems,
    )


def _pci_ids(gpus: list[Mapping[str, Any]]) -> set[str]:
    return {i for g in gpus if (i := datasheet.pci_device_id(g.get("pci_device_id")))}


def _inventory(view: ResultView) -> list[Mapping[str, Any]]:
    """The GPU monitor's inventory: what the backend said each GPU it sampled is."""
    found = view.gpu_monitor.get("inventory")
    return (
        [g for g in found.values() if isinstance(g, Mapping)] if isinstance(found, Mapping) else []
    )


def _inventory_problems(view: ResultView, file: str, name: str) -> list[str]:
    """The monitor's inventory names the system record's GPU."""
    named = {str(g["name"]) for g in _inventory(view) if isinstance(g.get("name"), str)}
    if named and named != {name}:
        return [
            f"{file}: gpu_monitor.inventory names {', '.join(sorted(named))[:80]} but "
            f"system.gpus names {name}"
        ]
    return []


def _pci_problems(
    file: str,
    mine: list[Mapping[str, Any]],
    run_system: Any,
    row: str | None,
    inventory: list[Mapping[str, Any]],
) -> tuple[str | None, list[str]]:
    """The PCI device ids the result's and the run's system records and the GPU monitor's
    inventory give (each the backend's reading) against each other and the datasheet
    row's: (why not checked, problems)."""
    ids, sampled = _pci_ids(mine), _pci_ids(inventory)
    if ids and sampled and sampled != ids:
        return None, [
            f"{file}: gpu_monitor.inventory PCI device id {', '.join(sorted(sampled))} but "
            f"system.gpus says {', '.join(sorted(ids))}"
        ]
    source = "system.gpus" if ids else "gpu_monitor.inventory"
    ids = ids or sampled
    if not ids:  # records made before milarun read it (the H100 run of 2026-11-28)
        return "PCI device id in neither the system record nor the monitor's inventory", []
    theirs = _pci_ids(_system_gpus(run_system)) if isinstance(run_system, Mapping) else set()
    if theirs and not ids <= theirs:
        return None, [
            f"{file}: {source} PCI device id {', '.join(sorted(ids))} but the run's system "
            f"record (.sysinfo) says {', '.join(sorted(theirs))}"
        ]
    known = datasheet.PCI_DEVICE_IDS.get(row or "")
    if not known:
        return f"no PCI device id in the datasheet for {row or 'an unknown device'}", []
    if not ids <= set(known):
        return None, [
            f"{file}: {source} PCI device id {', '.join(sorted(ids))} is not the {row} "
            f"datasheet row's ({', '.join(known)})"
        ]
    return None, []


def _monitor_problems(
    view: ResultView, file: str, mine: list[Mapping[str, Any]], machine: Mapping[str, Any] | None
) -> list[str]:
    """The GPU monitor's inventory against the system records: each GPU it sampled is one
    the run's provenance lists (by UUID), and its memory size is the system record's."""
    provenance = machine.get("provenance") if isinstance(machine, Mapping) else None
    firmware = provenance.get("gpu_firmware") if isinstance(provenance, Mapping) else None
    listed = firmware.get("gpus") if isinstance(firmware, Mapping) else None
    uuids = {
        str(g.get("uuid")).lower()
        for g in listed or []
        if isinstance(g, Mapping) and isinstance(g.get("uuid"), str)
    }
    memory = {float(g["memory_mb"]) for g in mine if is_finite(g.get("memory_mb"))}
    samples = view.gpu_monitor.get("samples")
    for sample in samples if isinstance(samples, list) else []:
        gpus = sample.get("gpus") if isinstance(sample, Mapping) else None
        for gid, reading in gpus.items() if isinstance(gpus, Mapping) else ():
            if uuids and str(gid).startswith("GPU-") and str(gid).lower() not in uuids:
                return [
                    f"{file}: gpu_monitor samples GPU {str(gid)[:60]} but the run's system "
                    "record (.sysinfo provenance) lists no such GPU"
                ]
            total = reading.get("memory") if isinstance(reading, Mapping) else None
            size = number(total[1]) if isinstance(total, list) and len(total) == 2 else None
            if (
                size is not None
                and memory
                and all(abs(size - m) > MEMORY_TOLERANCE * m for m in memory)
            ):
                return [
                    f"{file}: gpu_monitor samples a GPU of {_n(size)} MiB but system.gpus "
                    f"says {', '.join(_n(m) for m in sorted(memory))} MiB"
                ]
    return []


def flops_problem(
    view: ResultView, file: str
) -> tuple[flops.Expected | None, str | None, list[str]]:
    """milarun's FLOPs per example of the result and its precision (None: not recomputed,
    and why), and the bid's figures' disagreements with them."""
    contradiction = flops.argv_problem(view)
    if contradiction:
        return None, "its arguments contradict its argv", [f"{file}: {contradiction}"]
    found = flops.expected(view)
    if isinstance(found, str):
        return None, found, []
    eff = view.efficiency
    said = number(eff.flops_per_example) if eff is not None else None
    high = found.high if found.high is not None else found.value
    inside = found.value * (1 - FLOPS_TOLERANCE) <= (said or 0) <= high * (1 + FLOPS_TOLERANCE)
    if said is not None and not inside:
        gives = _n(found.value) if high == found.value else f"{_n(found.value)} to {_n(high)}"
        return (
            found,
            None,
            [
                f"{file}: efficiency.flops_per_example {_n(said)} but milarun's {found.how} "
                f"gives {gives} (more than {FLOPS_TOLERANCE:.0%} apart)"
            ],
        )
    precision = eff.precision if eff is not None else None
    if found.precision and isinstance(precision, str) and precision != found.precision:
        return (
            found,
            None,
            [
                f"{file}: efficiency.precision {precision[:20]} but its arguments run "
                f"{found.precision} (the peak that bounds it)"
            ],
        )
    return found, None, []


def _window_load(view: ResultView) -> float | None:
    """The mean utilisation (0-1) the GPU monitor read over the steady window, all GPUs."""
    found = view.series("train")
    window = steady.wall_clock_window(found) if found is not None else None
    samples = view.gpu_monitor.get("samples")
    if window is None or not isinstance(samples, list):
        return None
    start, end = window.spans[0][0], window.spans[-1][1]
    loads = []
    for sample in samples:
        when = number(sample.get("time")) if isinstance(sample, Mapping) else None
        gpus = sample.get("gpus") if isinstance(sample, Mapping) else None
        if when is None or not start <= when <= end or not isinstance(gpus, Mapping):
            continue
        loads += [
            load
            for reading in gpus.values()
            if isinstance(reading, Mapping) and (load := number(reading.get("load"))) is not None
        ]
    return sum(loads) / len(loads) if loads else None


def energy_problems(
    view: ResultView, file: str, expected: flops.Expected | None, device: Device
) -> tuple[bool, list[str]]:
    """The energy bounds (whether they could be applied): FLOPs per joule at most the
    device's peak per board watt x ENERGY_MARGIN; over the window, the power of a busy GPU."""
    said = view.energy
    watts = datasheet.board_power_w(device.name)
    per_example = expected.value if expected is not None else None
    precision = expected.precision if expected is not None else None
    peak = datasheet.peak_flops(device.name, precision)
    if said is None or watts is None or not is_finite(said.joules) or said.joules <= 0:
        return False, []
    gpus = max(1, len(said.gpus))
    seconds = said.seconds
    mean_watts = said.joules / seconds / gpus if is_finite(seconds) and seconds > 0 else None
    if mean_watts is not None and mean_watts < BUSY_POWER * watts:
        return True, [
            f"{file}: its GPU drew {mean_watts:,.0f} W over the steady window, under "
            f"{BUSY_POWER:.0%} of the {device.row} board power ({watts:,.0f} W): not a busy device"
        ]
    load = _window_load(view)
    if load is not None and load < BUSY_LOAD:
        return True, [
            f"{file}: its GPU monitor reads a mean utilisation of {load:.0%} over the steady "
            f"window, under {BUSY_LOAD:.0%}: not a busy device"
        ]
    if per_example is None or peak is None or not is_finite(said.examples):
        return True, []
    per_joule = per_example * said.examples / said.joules
    most = peak / watts * ENERGY_MARGIN
    if per_joule > most:
        return True, [
            f"{file}: {per_joule / 1e12:,.2f} TFLOP per joule (energy.examples x milarun's "
            f"FLOPs / energy.joules), above {ENERGY_MARGIN:g}x the {device.row} datasheet's "
            f"{peak / 1e12:,.1f} TFLOP/s at {watts:,.0f} W ({most / 1e12:,.2f} TFLOP/J)"
        ]
    return True, []
