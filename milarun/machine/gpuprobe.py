"""What says this machine has GPUs, without NVML or AMD SMI and without importing torch here.

NVML (or AMD SMI) can fail where GPUs exist (no libnvidia-ml in a container, a
driver/library mismatch), so ``jobs`` and ``doctor`` also look at the device files and ask
torch in a subprocess (the harness never imports torch itself: it would slow every command
and hold a CUDA context).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milarun.machine import gpu
from milarun.machine.gpu.base import XPU_UNMEASURED

# Every vendor's device nodes (NVIDIA's per-GPU nodes, not nvidiactl / nvidia-uvm; AMD's
# compute node): the backends'.
_DEVICE_FILE = re.compile("|".join(f"(?:{b.device_file})" for b in gpu.VENDORS))

_PROBE = r"""
import json, os
out = {"torch": None, "cuda": None, "hip": None, "cudnn": None, "nccl": None, "xpu": None,
       "devices": []}
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
elif getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
    out["xpu"] = True  # Intel GPUs, through Level Zero
    for i in range(torch.xpu.device_count()):
        p = torch.xpu.get_device_properties(i)
        out["devices"].append({
            "index": i, "name": p.name, "memory": p.total_memory, "uuid": "", "pci_bus_id": None,
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


def device_files(dev: Path | str | None = None) -> list[str]:
    """GPU device nodes present (``/dev/nvidia0``, ``/dev/kfd``, ...), sorted."""
    if dev is None:
        dev = os.environ.get("MILARUN_DEV_DIR", "/dev")  # tests: a folder of fake nodes
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    return sorted(str(Path(dev) / n) for n in names if _DEVICE_FILE.fullmatch(n))


def torch_gpus(
    python: str | None = None, timeout: float = 120.0, env: dict[str, str] | None = None
) -> TorchGPUs:
    """Ask torch, in a child interpreter, which GPUs it sees (in PCI bus order)."""
    child_env = dict(os.environ if env is None else env)
    child_env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the order NVML uses
    try:
        done = subprocess.run(
            [python or sys.executable, "-c", _PROBE],
            env=child_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return TorchGPUs(error=f"torch probe did not run: {err}")
    for line in done.stdout.splitlines():
        if line.startswith("MILARUN_TORCH_PROBE "):
            try:
                data = json.loads(line.split(" ", 1)[1])
            except ValueError:
                break
            versions = {k: data.get(k) for k in ("torch", "cuda", "hip", "cudnn", "nccl", "xpu")}
            return TorchGPUs(tuple(data.get("devices") or ()), versions)
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return TorchGPUs(error=f"torch probe failed (exit {done.returncode}): {tail[:300]}")


def unseen_gpus(
    failure: str | None, probe: Callable[[], TorchGPUs] = torch_gpus, library: str = "NVML"
) -> str | None:
    """The one-line error for a machine that shows GPUs where its management library
    (``library``: NVML, AMD SMI) showed none (it failed with ``failure``, or counted
    0): what was seen and the fix; None on a CPU machine.

    torch is asked (a child interpreter, ~2 s) only when the library failed and there are
    no device files: a library counting 0 GPUs on a machine without device files is a CPU
    machine.
    """
    files = device_files()
    seen_by_torch = probe() if not files and failure is not None else TorchGPUs()
    count = seen_by_torch.count
    if files:
        seen = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
        seen += " exists" if len(files) == 1 else " exist"
    elif count:
        seen = f"torch sees {count} GPU{'s' if count > 1 else ''}"
    else:
        return None
    if seen_by_torch.versions.get("xpu"):
        return (
            f"{seen} (Intel, torch.xpu), but {failure}: milarun has no management library for "
            f"them ({XPU_UNMEASURED}); name them with --devices 0,1,... to run on them, or pass "
            "--devices cpu:N to benchmark the CPU on purpose"
        )
    fix = gpu.by_device_files(files).library_fix
    return (
        f"{seen}, but {failure or f'{library} sees no GPU'}; {fix}, or pass "
        "--devices cpu:N to benchmark the CPU on purpose"
    )
