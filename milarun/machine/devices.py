"""Devices: discovery (no torch import), per-instance device (the GPUs' readings:
milarun.machine.gpu, the device interface; their monitors: milarun.machine.monitors).

The ``jobs`` process discovers GPUs through the machine's backend (NVML, AMD SMI; honouring
the visible-devices variables), never falling back to the CPU where the machine shows GPUs
the backend cannot see, or takes ``--devices`` (ids: the backend's, in PCI bus order, or
UUIDs; milarun.machine.gpuids resolves them); each instance learns its device from
``MILARUN_DEVICE`` and ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from milarun.errors import DeviceSpecError, GPUDiscoveryError
from milarun.machine import gpu, gpuprobe

CPU_KIND = "cpu"
GPU_KIND = "cuda"


@dataclass(frozen=True)
class Device:
    """One benchmark slot: a GPU (by its id) or a CPU slice (by its index)."""

    kind: str  # "cuda" (CUDA or ROCm GPU) or "cpu" (a CPU slice)
    id: str  # GPU id as the operator names it (the backend's index, or UUID), or the slice
    slices: int = 1  # CPU slices in the whole set (for the thread budget)
    uuid: str | None = None  # NVML's UUID of the GPU, what CUDA is given (gpuids)
    pci_bus_id: str | None = None  # the backend's, for the result

    @property
    def label(self) -> str:
        return f"cpu:{self.id}" if self.kind == CPU_KIND else f"cuda:{self.id}"


def parse_device_spec(spec: str) -> list[Device]:
    """``"0,1,3"`` -> GPUs 0, 1 and 3; ``"cpu:N"`` -> N CPU slices."""
    text = spec.strip()
    m = re.fullmatch(r"cpu(?::(\d+))?", text)
    if m:
        n = int(m.group(1) or 1)
        if n < 1:
            raise DeviceSpecError(f"--devices {spec!r}: cpu:N needs N >= 1")
        return [Device(CPU_KIND, str(i), n) for i in range(n)]
    ids = [part.strip() for part in text.split(",")]
    if not text or any(not re.fullmatch(r"\d+|GPU-[0-9a-fA-F-]+", i) for i in ids):
        raise DeviceSpecError(
            f"--devices {spec!r} is not a device list: use GPU ids like 0,1,3 or cpu:N"
        )
    if len(set(ids)) != len(ids):
        raise DeviceSpecError(f"--devices {spec!r} names a device twice")
    return [Device(GPU_KIND, i) for i in ids]


def visible_ids(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The GPU ids the visible-devices variables leave (None: every GPU). ROCm reads
    ``ROCR_VISIBLE_DEVICES`` (the runtime's), then ``HIP_VISIBLE_DEVICES``, or where that
    is unset ``CUDA_VISIBLE_DEVICES`` (HIP's alias, as HIP and torch's ROCm build read it),
    numbering the GPUs ROCR left; CUDA reads only the last. Ids are the management
    library's (indices or UUIDs)."""
    env = os.environ if environ is None else environ
    ids: list[str] | None = None
    names = [n for n in VISIBLE_VARIABLES if env.get(n) is not None]
    for own, alias in gpu.VISIBLE_ALIASES:
        if own in names and alias in names:
            names.remove(alias)  # the runtime's own variable wins over its alias
    for name in names:
        chosen = [x.strip() for x in env[name].split(",") if x.strip()]
        if ids is not None and all(x.isdigit() for x in chosen):
            chosen = [ids[int(x)] for x in chosen if int(x) < len(ids)]
        ids = chosen
    return ids


def gpu_local_cpus(ids: list[str], backend: gpu.Backend | None = None) -> dict[str, list[int]]:
    """GPU id -> the CPUs the backend says are close to it (empty when it cannot tell)."""
    if backend is None:
        backend = gpu.load()
    if not backend.usable:
        return {}
    words = ((os.cpu_count() or 1) + 63) // 64
    out = {}
    for gid in ids:
        try:
            cpus = backend.cpu_affinity(backend.handle(gid), words)
        except Exception:
            continue
        if cpus is not None:
            out[gid] = cpus
    return out


def discover_devices(
    backend: gpu.Backend | None = None,
    probe: Callable[[], gpuprobe.TorchGPUs] = gpuprobe.torch_gpus,
) -> list[Device]:
    """GPUs the backend sees (restricted by the visible-devices variables); one CPU slice
    on a machine without GPUs or where ``CUDA_VISIBLE_DEVICES=""`` hides them.
    GPUDiscoveryError where the backend fails or sees none but the machine shows GPUs
    (gpuprobe.unseen_gpus)."""
    if backend is None:
        backend = gpu.load()
    failure = None if backend.usable else backend.reason
    count = 0
    if backend.usable:
        try:
            count = backend.count()
        except Exception as err:
            failure = f"{backend.label} failed: {err}"
    visible = visible_ids()
    if visible == []:  # the operator hid every GPU
        return [Device(CPU_KIND, "0", 1)]
    if count:
        return [Device(GPU_KIND, i) for i in visible or [str(i) for i in range(count)]]
    label = backend.label if backend.usable else "NVML"
    problem = gpuprobe.unseen_gpus(failure, probe, label)
    if problem:
        raise GPUDiscoveryError(problem)
    return [Device(CPU_KIND, "0", 1)]


def instance_environ(devices: list[Device], cpu_count: int | None = None) -> dict[str, str]:
    """Environment variables that give one instance its device(s)."""
    if devices[0].kind == GPU_KIND:
        # CUDA gets each GPU by NVML's UUID, so it opens the GPU NVML (the monitor, the CPU
        # affinity) names, whatever its own order; an unresolved index is read in PCI bus
        # order, NVML's. MILARUN_DEVICE keeps the ids as the operator named them.
        env = {
            "CUDA_VISIBLE_DEVICES": ",".join(d.uuid or d.id for d in devices),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "MILARUN_DEVICE": ",".join(d.label for d in devices),
        }
        if any(d.pci_bus_id for d in devices):
            env[BUS_IDS_ENV] = ",".join(d.pci_bus_id or "" for d in devices)
        return env
    # A CPU slice hides every GPU and gets its share, as threads, of the CPUs this process
    # may use (a Slurm job or container may hold fewer than the machine has).
    cores = cpu_count or len(os.sched_getaffinity(0)) or 1
    threads = max(1, cores * len(devices) // devices[0].slices)
    env = {"CUDA_VISIBLE_DEVICES": "", "MILARUN_DEVICE": ",".join(d.label for d in devices)}
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(threads)
    if "OMP_WAIT_POLICY" not in os.environ:
        # Idle OpenMP threads spinning on the slice's cores starve the test's own
        # DataLoader workers (benchmarks/README.md, "Figures behind the code").
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env


BUS_IDS_ENV = "MILARUN_PCI_BUS_IDS"  # the backend's PCI bus id of each GPU, for the result
# Every vendor's visible-devices variables, in the order the runtimes read them
# (visible_ids); an instance gets its GPUs by CUDA_VISIBLE_DEVICES, which every vendor's
# torch reads, so launching drops the others (discovery read them).
VISIBLE_VARIABLES = gpu.VISIBLE_VARIABLES
SELECTING_VARIABLE = "CUDA_VISIBLE_DEVICES"
DROPPED_AT_LAUNCH = frozenset(VISIBLE_VARIABLES) - {SELECTING_VARIABLE}
# Set by torchrun for its ranks. Left over in the operator's shell they would make an
# instance launched on its own believe it is one rank of a distributed job.
RANK_VARIABLES = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "GROUP_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)


def launch_environ(
    devices: list[Device], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The whole environment of an instance on ``devices``: this process's (``environ``),
    without torchrun's rank variables (torchrun sets its own for its ranks) and the
    vendors' other visible-devices variables (ROCm's; discovery read them: the instance's
    CUDA_VISIBLE_DEVICES names its GPUs among all of them), plus instance_environ."""
    base = os.environ if environ is None else environ
    kept = {
        k: v
        for k, v in base.items()
        if k not in RANK_VARIABLES
        and k not in DROPPED_AT_LAUNCH
        and not k.startswith("TORCHELASTIC_")
    }
    return {**kept, **instance_environ(devices)}


# -- inside a benchmark process ------------------------------------------------------
def instance_device_label(environ: Mapping[str, str] | None = None) -> str:
    """``cuda:<id>`` or ``cpu:<i>`` naming this instance's device for the result."""
    env = os.environ if environ is None else environ
    spec = env.get("MILARUN_DEVICE")
    if spec and spec.startswith(CPU_KIND):
        return spec
    if spec and spec.startswith(GPU_KIND + ":"):
        return spec.split(",")[0]  # the first of the labels `jobs` gave
    visible = visible_ids(env)
    if spec == GPU_KIND or (spec is None and visible):
        return f"cuda:{visible[0]}" if visible else "cuda:0"
    if spec is None and visible is None and _gpu_available():
        return "cuda:0"  # a plain `milarun run` on a GPU machine uses the first GPU
    return "cpu:0"


def _gpu_available() -> bool:
    torch = sys.modules.get("torch")
    if torch is not None:
        return bool(torch.cuda.is_available())
    backend = gpu.load()
    try:
        return backend.usable and backend.count() > 0
    except Exception:
        return False
