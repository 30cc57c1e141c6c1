"""The doctor's per-GPU health findings, read through the device backend (NVML, AMD SMI):
persistence, MIG, ECC, pending page retirement, clocks, power limit, PCIe link, GPU links
and temperature, each with its fix. A reading the backend does not give has no finding."""

from __future__ import annotations

from collections.abc import Callable

from milarun.doctor.check import FAIL, INFO, PASS, WARN, Check
from milarun.machine.gpu import Backend, GpuInfo, Health

HOT_MARGIN = 10  # degrees C under the slowdown threshold at which an idle GPU is too hot
Finding = tuple[str, str, str | None]  # status, detail, fix


def _persistence(h: Health, i: int, backend: Backend) -> Finding | None:
    if h.persistence is None:
        return None
    if h.persistence:
        return PASS, "on", None
    return (
        WARN,
        "off: the driver drops the GPU's state when no process uses it, and each "
        "run's start pays to set it up again",
        (backend.persistence_fix or "").format(i=i) or None,
    )


def _mig(h: Health, i: int, backend: Backend) -> Finding | None:
    if not h.has_mig:
        return None
    if h.mig is None:
        return PASS, "off (this GPU has no MIG)", None
    current, pending = h.mig
    if current or pending:
        state = "enabled" if current else "enabled after a reset"
        return (
            WARN,
            f"{state}: the suite benchmarks whole GPUs",
            f"{backend.partition_fix.format(i=i)}, then reset the GPU ({backend.reset_command(i)})",
        )
    return PASS, "off", None


def _ecc(h: Health, i: int, backend: Backend) -> Finding | None:
    errors = h.ecc_uncorrected
    if errors is None:
        return INFO, "ECC not offered by this GPU", None
    mode = {True: "ECC on", False: "ECC off", None: "ECC"}[h.ecc_enabled]
    if errors > 0:
        return (
            FAIL,
            f"{mode}: {errors} uncorrected errors since the driver loaded",
            f"stop its work and reset it ({backend.reset_command(i)}); if errors return, "
            "service it",
        )
    return PASS, f"{mode}, no uncorrected error since the driver loaded", None


def _pages(h: Health, i: int, backend: Backend) -> Finding | None:
    retired, rows = h.retired_pending, h.remapped_rows
    if retired is None and rows is None:
        return None
    if rows is not None and rows[3]:
        return (
            FAIL,
            "row remapping failed: memory errors it could not repair",
            "the GPU needs service (RMA)",
        )
    if retired or (rows is not None and rows[2]):
        return (
            WARN,
            "memory pages retired or rows remapped, pending a reset",
            f"reset the GPU ({backend.reset_command(i)}) or reboot to apply them",
        )
    kind = "row remaps" if rows is not None else "page retirements"
    return PASS, f"no {kind} pending", None


def _clocks(h: Health, i: int, backend: Backend) -> Finding | None:
    now, top, app, default = h.clock, h.max_clock, h.app_clock, h.default_app_clock
    if now is None and top is None:
        return None
    name = backend.clock_name
    detail = f"{name} {now} MHz now, max {top}" + (f", application {app}" if app else "") + " MHz"
    if app and default and app < default:
        return (
            WARN,
            detail + f": application clock below its default {default} MHz",
            backend.app_clock_fix.format(i=i),
        )
    idle = " (an idle GPU clocks down)" if now is not None and top and now < top else ""
    return PASS, detail + idle, None


def _power(h: Health, i: int, backend: Backend) -> Finding | None:
    limit, default = h.power_limit_w, h.default_power_limit_w
    if limit is None:
        return None
    detail = f"limit {limit:.0f} W"
    if default:
        detail += f", default {default:.0f} W"
    if default and limit < default:
        fix = backend.power_fix
        return WARN, detail + ": the GPU throttles under load", fix.format(i=i, w=default)
    return PASS, detail, None


def _pcie(h: Health, i: int, backend: Backend) -> Finding | None:
    gen, width, max_gen, max_width = h.pcie_gen, h.pcie_width, h.pcie_max_gen, h.pcie_max_width
    if gen is None or width is None:
        return None
    detail = f"gen {gen} x{width} (max gen {max_gen} x{max_width})"
    why, fixes = [], []
    if max_gen and gen < max_gen:
        why.append("generation below max")
        fixes.append("an idle GPU may lower its link generation: run doctor again under load")
    if max_width and width < max_width:
        why.append("fewer lanes than max")
        fixes.append("check the slot, riser and BIOS lane settings")
    if why:
        return WARN, f"{detail}: {', '.join(why)}", "; ".join(fixes)
    return PASS, detail, None


def _links(h: Health, i: int, backend: Backend) -> Finding | None:
    return (INFO, h.gpu_links, None) if h.gpu_links else None


def _temperature(h: Health, i: int, backend: Backend) -> Finding | None:
    now, slow = h.temperature, h.slowdown_temperature
    if now is None:
        return None
    detail = f"{now:g} C" + (f" (slows down at {slow:g} C)" if slow else "")
    if slow and now >= slow - HOT_MARGIN:
        return WARN, detail + ": hot for a GPU at rest", "check the cooling and the airflow"
    return PASS, detail, None


TOPICS: tuple[tuple[str, Callable[[Health, int, Backend], Finding | None]], ...] = (
    ("persistence", _persistence),
    ("MIG", _mig),
    ("memory errors", _ecc),
    ("pending pages", _pages),
    ("clocks", _clocks),
    ("power", _power),
    ("PCIe", _pcie),
    ("GPU links", _links),
    ("temperature", _temperature),
)


def health(backend: Backend, gpus: list[GpuInfo]) -> list[Check]:
    """Each GPU's persistence, MIG, ECC, pending pages, clocks, power, PCIe link, GPU
    links and heat, as far as its backend tells."""
    checks = []
    for g in gpus:
        readings = backend.health(backend.handle(str(g.index)))
        for topic, judge in TOPICS:
            found = judge(readings, g.index, backend)
            if found is not None:
                checks.append(Check(f"gpu{g.index} {topic}", *found))
    return checks
