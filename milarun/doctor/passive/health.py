"""The doctor's per-GPU health findings, read from NVML: persistence, MIG, ECC, pending
page retirement, clocks, power limit, PCIe link and temperature, each with its fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from milarun.doctor.check import FAIL, INFO, PASS, WARN, Check
from milarun.machine.devices import NvmlGpu

# pynvml's constants, by their names there (a fake NVML need not define them).
NVML_CLOCK_SM = 1


NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1


NVML_VOLATILE_ECC = 0


NVML_TEMPERATURE_GPU = 0


NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1


NVML_FEATURE_ENABLED = 1


HOT_MARGIN = 10  # degrees C under the slowdown threshold at which an idle GPU is too hot


RESET = "`sudo nvidia-smi -i {i} -r`"


# -- each GPU's health -----------------------------------------------------------------------
def _read(read: Callable[[], Any]) -> Any:
    """A reading, or None where this GPU or driver does not offer it (NVMLError_NotSupported)."""
    try:
        return read()
    except Exception:
        return None


Finding = tuple[str, str, str | None]  # status, detail, fix


def _persistence(nvml: Any, h: Any, i: int) -> Finding | None:
    mode = _read(lambda: nvml.nvmlDeviceGetPersistenceMode(h))
    if mode is None:
        return None
    if mode == NVML_FEATURE_ENABLED:
        return PASS, "on", None
    return (
        WARN,
        "off: the driver drops the GPU's state when no process uses it, and each "
        "run's start pays to set it up again",
        f"`sudo nvidia-smi -i {i} -pm 1` (or run nvidia-persistenced)",
    )


def _mig(nvml: Any, h: Any, i: int) -> Finding | None:
    modes = _read(lambda: nvml.nvmlDeviceGetMigMode(h))
    if modes is None:
        return PASS, "off (this GPU has no MIG)", None
    current, pending = modes
    if NVML_FEATURE_ENABLED in (current, pending):
        state = "enabled" if current == NVML_FEATURE_ENABLED else "enabled after a reset"
        return (
            WARN,
            f"{state}: the suite benchmarks whole GPUs",
            f"`sudo nvidia-smi -i {i} -mig 0`, then reset the GPU ({RESET.format(i=i)})",
        )
    return PASS, "off", None


def _ecc(nvml: Any, h: Any, i: int) -> Finding | None:
    modes = _read(lambda: nvml.nvmlDeviceGetEccMode(h))
    errors = _read(
        lambda: nvml.nvmlDeviceGetTotalEccErrors(
            h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC
        )
    )
    if errors is None:
        return INFO, "ECC not offered by this GPU", None
    mode = "on" if modes and modes[0] == NVML_FEATURE_ENABLED else "off"
    if errors > 0:
        return (
            FAIL,
            f"ECC {mode}: {errors} uncorrected errors since the driver loaded",
            f"stop its work and reset it ({RESET.format(i=i)}); if errors return, service it",
        )
    return PASS, f"ECC {mode}, no uncorrected error since the driver loaded", None


def _pages(nvml: Any, h: Any, i: int) -> Finding | None:
    retired = _read(lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(h))
    rows = _read(lambda: nvml.nvmlDeviceGetRemappedRows(h))  # corrected, uncorrected,
    if retired is None and rows is None:  # pending, failure occurred
        return None
    if rows is not None and rows[3]:
        return (
            FAIL,
            "row remapping failed: memory errors it could not repair",
            "the GPU needs service (RMA)",
        )
    if retired == NVML_FEATURE_ENABLED or (rows is not None and rows[2]):
        return (
            WARN,
            "memory pages retired or rows remapped, pending a reset",
            f"reset the GPU ({RESET.format(i=i)}) or reboot to apply them",
        )
    kind = "row remaps" if rows is not None else "page retirements"
    return PASS, f"no {kind} pending", None


def _clocks(nvml: Any, h: Any, i: int) -> Finding | None:
    now = _read(lambda: nvml.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM))
    top = _read(lambda: nvml.nvmlDeviceGetMaxClockInfo(h, NVML_CLOCK_SM))
    app = _read(lambda: nvml.nvmlDeviceGetApplicationsClock(h, NVML_CLOCK_SM))
    default = _read(lambda: nvml.nvmlDeviceGetDefaultApplicationsClock(h, NVML_CLOCK_SM))
    if now is None and top is None:
        return None
    detail = f"SM {now} MHz now, max {top}" + (f", application {app}" if app else "") + " MHz"
    if app and default and app < default:
        return (
            WARN,
            detail + f": application clock below its default {default} MHz",
            f"`sudo nvidia-smi -i {i} -rac` (reset the application clocks)",
        )
    idle = " (an idle GPU clocks down)" if now is not None and top and now < top else ""
    return PASS, detail + idle, None


def _power(nvml: Any, h: Any, i: int) -> Finding | None:
    limit = _read(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h))  # mW
    default = _read(lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(h))
    if limit is None:
        return None
    detail = f"limit {limit / 1000:.0f} W"
    if default:
        detail += f", default {default / 1000:.0f} W"
    if default and limit < default:
        return (
            WARN,
            detail + ": the GPU throttles under load",
            f"`sudo nvidia-smi -i {i} -pl {default / 1000:.0f}`",
        )
    return PASS, detail, None


def _pcie(nvml: Any, h: Any, i: int) -> Finding | None:
    gen = _read(lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(h))
    width = _read(lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(h))
    max_gen = _read(lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(h))
    max_width = _read(lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(h))
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


def _temperature(nvml: Any, h: Any, i: int) -> Finding | None:
    now = _read(lambda: nvml.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU))
    slow = _read(
        lambda: nvml.nvmlDeviceGetTemperatureThreshold(h, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    )
    if now is None:
        return None
    detail = f"{now} C" + (f" (slows down at {slow} C)" if slow else "")
    if slow and now >= slow - HOT_MARGIN:
        return WARN, detail + ": hot for a GPU at rest", "check the cooling and the airflow"
    return PASS, detail, None


TOPICS = (
    ("persistence", _persistence),
    ("MIG", _mig),
    ("memory errors", _ecc),
    ("pending pages", _pages),
    ("clocks", _clocks),
    ("power", _power),
    ("PCIe", _pcie),
    ("temperature", _temperature),
)


def health(nvml: Any, gpus: list[NvmlGpu]) -> list[Check]:
    """Each GPU's persistence, MIG, ECC, pending pages, clocks, power, PCIe link, heat."""
    checks = []
    for g in gpus:
        h = nvml.nvmlDeviceGetHandleByIndex(g.index)
        for topic, read in TOPICS:
            found = read(nvml, h, g.index)
            if found is not None:
                checks.append(Check(f"gpu{g.index} {topic}", *found))
    return checks
