"""The device interface and its backends, one per vendor library (DESIGN section 1,
machine wing): milarun.machine.gpu.base says what a backend answers; ``load`` picks the
one this machine has."""

from __future__ import annotations

from pathlib import Path

from milarun.machine.gpu import amd, nvml
from milarun.machine.gpu.base import (
    XPU_UNMEASURED,
    Backend,
    Events,
    GpuInfo,
    Health,
    Tools,
    bus_id,
    text,
)

PCI_DEVICES = Path("/sys/bus/pci/devices")
INTEL = "0x8086"

__all__ = [
    "Backend",
    "Events",
    "GpuInfo",
    "Health",
    "Tools",
    "XPU_UNMEASURED",
    "bus_id",
    "intel_gpus",
    "load",
    "plain",
    "text",
]


def plain(reason: str) -> Backend:
    """The backend of a machine where no library answers: sees no GPU, says why."""
    return Backend(reason)


def load(pci: Path = PCI_DEVICES) -> Backend:
    """This machine's backend: NVML where it answers, else AMD SMI, else the plain backend
    with NVML's reason (and AMD SMI's, where amdsmi is installed but fails; and why Intel
    GPUs are not measured, where the PCI bus ``pci`` shows some)."""
    found, why = nvml.load()
    if found is not None:
        return found
    amd_found, amd_why = amd.load()
    if amd_found is not None:
        return amd_found
    if not amd_why.startswith("amdsmi not installed"):
        why = f"{why}; {amd_why}"
    intel = intel_gpus(pci)
    if intel:
        more = f" and {len(intel) - 2} more" if len(intel) > 2 else ""
        why = f"{why}; Intel GPU(s) at {', '.join(intel[:2])}{more}: {XPU_UNMEASURED}"
    return plain(why)


def intel_gpus(pci: Path = PCI_DEVICES) -> list[str]:
    """The PCI addresses of Intel display controllers (the kernel's vendor and class files:
    read, nothing loaded), sorted; integrated graphics count too."""
    try:
        names = sorted(p.name for p in pci.iterdir())[:4096]
    except OSError:
        return []
    found = []
    for name in names:
        try:
            vendor = (pci / name / "vendor").read_text().strip()
            kind = (pci / name / "class").read_text().strip()
        except OSError:
            continue
        if vendor == INTEL and kind.startswith("0x03"):  # 0x03xxxx: display controllers
            found.append(name)
    return found
