"""The device interface and its backends, one per vendor library (DESIGN section 1,
machine wing): milarun.machine.gpu.base says what a backend answers; ``load`` picks the
one this machine has."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
# Every vendor's backend, the order ``load`` tries them.
VENDORS: tuple[type[Backend], ...] = (nvml.NvmlBackend, amd.AmdSmiBackend)
# Every vendor's visible-devices variables, in the order the runtimes read them (ROCm's
# own before CUDA_VISIBLE_DEVICES, its alias), and the (variable, alias) pairs.
VISIBLE_VARIABLES = tuple(dict.fromkeys(v for b in reversed(VENDORS) for v in b.visible_variables))
VISIBLE_ALIASES = tuple(pair for b in VENDORS for pair in b.visible_aliases)

__all__ = [
    "Backend",
    "Events",
    "GpuInfo",
    "Health",
    "Tools",
    "VENDORS",
    "VISIBLE_ALIASES",
    "VISIBLE_VARIABLES",
    "XPU_UNMEASURED",
    "built_for",
    "bus_id",
    "by_device_files",
    "intel_gpus",
    "load",
    "plain",
    "runtime_version",
    "text",
    "unloaded",
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


def built_for(version: Any) -> type[Backend] | None:
    """The backend of the vendor whose GPUs torch was built for (``version``: torch.version,
    or a mapping of its fields as milarun.machine.gpuprobe reads them); None: a CPU build."""
    for backend in VENDORS:
        if _field(version, backend.torch_build):
            return backend
    return None


def runtime_version(version: Any) -> str | None:
    """torch's GPU runtime version (CUDA's or HIP's); None: a CPU build."""
    backend = built_for(version)
    return str(_field(version, backend.torch_build)) if backend else None


def unloaded(version: Any, backend: Backend) -> type[Backend] | None:
    """The vendor whose GPUs torch was built for where its library is not the one loaded
    (``backend``) and `jobs` runs its GPUs by their ids (its ``unloaded_warning``); None
    where the missing library is a failure (or none is missing)."""
    found = built_for(version)
    if found is None or isinstance(backend, found) or found.unloaded_warning is None:
        return None
    return found


def by_device_files(files: list[str]) -> type[Backend]:
    """The vendor whose device nodes ``files`` (/dev/...) all are; the plain backend (its
    words are NVIDIA's) where no vendor's pattern matches them all."""
    names = [f.rsplit("/", 1)[-1] for f in files]
    for backend in VENDORS:
        if names and all(re.fullmatch(backend.device_file, n) for n in names):
            return backend
    return Backend


def _field(version: Any, name: str) -> Any:
    return version.get(name) if isinstance(version, Mapping) else getattr(version, name, None)
