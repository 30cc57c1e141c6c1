"""The device interface and its backends, one per vendor library (DESIGN section 1,
machine wing): milarun.machine.backends.base says what a backend answers; ``load`` picks the
one this machine has."""

from __future__ import annotations

from milarun.machine.backends import amd, nvml
from milarun.machine.backends.base import Backend, Events, GpuInfo, Health, bus_id, text

__all__ = ["Backend", "Events", "GpuInfo", "Health", "bus_id", "text", "load", "plain"]


def plain(reason: str) -> Backend:
    """The backend of a machine where no library answers: sees no GPU, says why."""
    return Backend(reason)


def load() -> Backend:
    """This machine's backend: NVML where it answers, else AMD SMI, else the plain backend
    with NVML's reason (and AMD SMI's, where amdsmi is installed but fails)."""
    found, why = nvml.load()
    if found is not None:
        return found
    amd_found, amd_why = amd.load()
    if amd_found is not None:
        return amd_found
    if not amd_why.startswith("amdsmi not installed"):
        why = f"{why}; {amd_why}"
    return plain(why)
