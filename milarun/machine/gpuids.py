"""Which physical GPU each instance gets, whatever CUDA's own numbering.

GPU ids the operator gives (``--devices 0,1`` or ``CUDA_VISIBLE_DEVICES``) are NVML's: indices
in PCI bus order, or UUIDs. CUDA numbers GPUs fastest-first by default, so on a mixed-GPU host
the same index names another GPU there, and the monitor, the peak memory and the CPU affinity
would describe a GPU the test never used. ``jobs`` resolves each id to NVML's UUID and PCI bus
id (resolve_gpus); each instance gets its GPU by UUID (devices.instance_environ) and records
the id, the UUID and the bus id (instance_gpus).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from milarun.errors import DeviceSpecError
from milarun.machine import devices, gpu, gpuprobe
from milarun.machine.devices import GPU_KIND, Device
from milarun.machine.gpu import Backend

PCI_ORDER = "PCI_BUS_ID"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuIdentity:
    """One GPU of an instance, as its result records it (``gpu_identity``)."""

    id: str  # as the operator named it: an NVML index (PCI bus order) or a UUID
    uuid: str | None  # NVML's, the name CUDA was given; None when NVML could not tell
    pci_bus_id: str | None
    note: str | None = None  # how CUDA found it when not by UUID

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "uuid": self.uuid, "pci_bus_id": self.pci_bus_id, "note": self.note}


def _identify(backend: Backend, gid: str) -> tuple[str | None, str | None, str | None]:
    """(UUID, PCI bus id, why not) of the GPU the backend names ``gid``."""
    try:
        handle = backend.handle(gid)
        uuid = backend.uuid(handle)
    except Exception as err:
        return None, None, str(err) or type(err).__name__
    try:
        bus = backend.pci_bus_id(handle)
    except Exception:  # the UUID alone is enough to open the right GPU
        bus = None
    return uuid, bus, None


def resolve_gpus(
    devs: list[Device], backend: Backend | None = None, environ: Mapping[str, str] | None = None
) -> list[Device]:
    """``devs`` with the backend's UUID and PCI bus id of each GPU (CPU slices unchanged).

    An index the backend does not have is a DeviceSpecError; a GPU it cannot describe keeps
    its index (read in PCI bus order by its instance), with a warning. A backend whose UUIDs
    CUDA does not take (AMD SMI's) gives each GPU by index, with its bus id recorded.
    """
    if not devs or devs[0].kind != GPU_KIND:
        return devs
    env = os.environ if environ is None else environ
    order = env.get("CUDA_DEVICE_ORDER")
    if order and order != PCI_ORDER:
        log.warning(
            "CUDA_DEVICE_ORDER=%s is not used: GPU ids (--devices, "
            "CUDA_VISIBLE_DEVICES) are read in PCI bus order (NVML's, nvidia-smi's) "
            "and each instance gets its GPU by UUID",
            order,
        )
    if backend is None:
        backend = gpu.load()
    if not backend.usable:
        reason = backend.reason
        if gpuprobe.unseen_gpus(reason) is None:  # no device file and torch sees no GPU
            raise DeviceSpecError(
                f"--devices {','.join(d.id for d in devs)}: this machine shows no GPU "
                f"({reason}; no GPU device file; torch sees none): use --devices cpu:N"
            )
        log.warning(
            "%s: GPUs %s go to their instances by index, in PCI bus order",
            reason,
            ",".join(d.id for d in devs),
        )
        return [replace(d, uuid=d.id) if d.id.startswith("GPU-") else d for d in devs]
    _check_indices(devs, backend)
    resolved = []
    for dev in devs:
        uuid, bus, problem = _identify(backend, dev.id)
        if problem is not None:
            log.warning(
                "%s cannot describe GPU %s (%s): its instances get it by index, in PCI bus order",
                backend.label,
                dev.id,
                problem,
            )
            uuid = dev.id if dev.id.startswith("GPU-") else None
        elif not backend.selects_by_uuid:
            uuid = None
        resolved.append(replace(dev, uuid=uuid, pci_bus_id=bus))
    return resolved


def _check_indices(devs: list[Device], backend: Backend) -> None:
    try:
        count = backend.count()
    except Exception:
        return  # each lookup below says what is wrong
    for dev in devs:
        if dev.id.isdigit() and int(dev.id) >= count:
            raise DeviceSpecError(
                f"GPU {dev.id}: {backend.label} sees {count} GPU(s), ids 0 to {count - 1} in "
                f"PCI bus order ({backend.list_command.strip('`')} lists them); fix --devices "
                "or CUDA_VISIBLE_DEVICES"
            )


def instance_gpus(environ: Mapping[str, str] | None = None) -> tuple[GpuIdentity, ...]:
    """The GPUs of the instance whose environment is ``environ`` (this process's by
    default) as `jobs` gave them; empty for a CPU slice."""
    env = os.environ if environ is None else environ
    visible = [x.strip() for x in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    if not visible or not devices.instance_device_label(env).startswith(GPU_KIND):
        return ()
    spec = env.get("MILARUN_DEVICE") or ""
    # `jobs` names the ids in MILARUN_DEVICE (cuda:<id>,...); else CUDA's own list.
    ids = (
        [label.split(":", 1)[1] for label in spec.split(",")]
        if spec.startswith(GPU_KIND + ":")
        else visible
    )
    buses = env.get(devices.BUS_IDS_ENV, "").split(",")
    order = env.get("CUDA_DEVICE_ORDER") or "FASTEST_FIRST (CUDA's default)"
    gpus = []
    for i, name in enumerate(visible):
        gid = ids[i] if i < len(ids) else name
        bus = buses[i] if i < len(buses) and buses[i] else None
        if name.startswith("GPU-"):
            gpus.append(GpuIdentity(gid, name, bus))
        else:
            gpus.append(
                GpuIdentity(
                    gid,
                    None,
                    bus,
                    # AMD's instances are given an index by design (AMD SMI's UUIDs are
                    # not HIP's); NVIDIA's where NVML could not name the GPU
                    f"no UUID: the GPU runtime (CUDA, HIP) was given index {name}, in "
                    f"{order} order",
                )
            )
    return tuple(gpus)
