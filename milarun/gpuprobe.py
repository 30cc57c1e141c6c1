"""What says this machine has GPUs, without NVML and without importing torch here.

NVML can fail where GPUs exist (no libnvidia-ml in a container, a driver/library mismatch),
so ``jobs`` and ``doctor`` also look at the device files and ask torch in a subprocess (the
harness never imports torch itself: it would slow every command and hold a CUDA context).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# NVIDIA's per-GPU nodes (not nvidiactl / nvidia-uvm) and AMD's compute node.
_DEVICE_FILE = re.compile(r"nvidia\d+|kfd")

_PROBE = r"""
import json, os
out = {"torch": None, "cuda": None, "hip": None, "cudnn": None, "nccl": None, "devices": []}
import torch
out["torch"] = torch.__version__
out["cuda"] = torch.version.cuda
out["hip"] = getattr(torch.version, "hip", None)
if torch.cuda.is_available():
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
    try:
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:
        pass
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        uuid = str(getattr(p, "uuid", "") or "")
        bus = None
        if getattr(p, "pci_bus_id", None) is not None:
            bus = "%08X:%02X:%02X.0" % (p.pci_domain_id, p.pci_bus_id, p.pci_device_id)
        out["devices"].append({
            "index": i, "name": p.name, "memory": p.total_memory,
            "uuid": ("GPU-" + uuid) if uuid and not uuid.startswith("GPU-") else uuid,
            "pci_bus_id": bus,
        })
print("MILARUN_TORCH_PROBE " + json.dumps(out))
"""


@dataclass(frozen=True)
class TorchGPUs:
    """What torch sees, from a subprocess: versions and one dict per visible GPU
    ({index, name, memory, uuid, pci_bus_id}); ``error`` when the probe itself failed."""

    devices: tuple[dict[str, Any], ...] = ()
    versions: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def count(self) -> int:
        return len(self.devices)


def device_files(dev: Path | str = "/dev") -> list[str]:
    """GPU device nodes present (``/dev/nvidia0``, ``/dev/kfd``, ...), sorted."""
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    return sorted(str(Path(dev) / n) for n in names if _DEVICE_FILE.fullmatch(n))


def torch_gpus(python: str | None = None, timeout: float = 120.0,
               env: dict[str, str] | None = None) -> TorchGPUs:
    """Ask torch, in a child interpreter, which GPUs it sees (in PCI bus order)."""
    child_env = dict(os.environ if env is None else env)
    child_env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the order NVML uses
    try:
        done = subprocess.run([python or sys.executable, "-c", _PROBE], env=child_env,
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        return TorchGPUs(error=f"torch probe did not run: {err}")
    for line in done.stdout.splitlines():
        if line.startswith("MILARUN_TORCH_PROBE "):
            try:
                data = json.loads(line.split(" ", 1)[1])
            except ValueError:
                break
            versions = {k: data.get(k) for k in ("torch", "cuda", "hip", "cudnn", "nccl")}
            return TorchGPUs(tuple(data.get("devices") or ()), versions)
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return TorchGPUs(error=f"torch probe failed (exit {done.returncode}): {tail[:300]}")
