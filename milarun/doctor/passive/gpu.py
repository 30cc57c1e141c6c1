"""`milarun doctor`'s GPU checks: NVML and torch agree, versions, each GPU's health.

Every reading goes through the NVML object it is given (pynvml, or a fake with the same
names) and a :class:`~milarun.machine.gpuprobe.TorchGPUs`; nothing here imports torch.
"""

from __future__ import annotations

from typing import Any

from milarun.doctor.check import FAIL, INFO, PASS, WARN, Check
from milarun.machine.devices import NvmlGpu, bus_id, nvml_gpus, nvml_text
from milarun.machine.gpuprobe import TorchGPUs

MEMORY_TOLERANCE = 0.02  # torch's total excludes what the driver reserves (~0.6% on an H100)


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# -- NVML and torch see the same GPUs ------------------------------------------------------
def inventory(
    nvml: Any, nvml_error: str | None, torch: TorchGPUs, dev_files: list[str]
) -> tuple[list[Check], list[NvmlGpu]]:
    """Checks that NVML and torch see the same GPUs, and NVML's GPUs (empty: no GPU checks
    follow, because there is no GPU or NVML cannot read them)."""
    if nvml is None:
        return [_without_nvml(nvml_error, torch, dev_files)], []
    try:
        gpus = nvml_gpus(nvml)
    except Exception as err:  # a GPU fallen off the bus, a driver/library mismatch
        return [
            Check(
                "GPUs",
                FAIL,
                f"NVML cannot read its GPUs: {err}",
                "`nvidia-smi` must list every GPU: reload the driver or reboot",
            )
        ], []
    if not gpus:
        alone = _without_nvml("NVML sees no GPU", torch, dev_files)
        return [alone], []
    if torch.error:  # the versions check fails with it: say it once
        names = ", ".join(sorted({g.name for g in gpus}))
        return [
            Check(
                "GPUs",
                INFO,
                f"NVML sees {_plural(len(gpus), 'GPU')} ({names}); what "
                "torch sees is unknown (see versions)",
            )
        ], gpus
    return [_agreement(gpus, torch), *_per_gpu(gpus, torch)], gpus


def _without_nvml(reason: str | None, torch: TorchGPUs, dev_files: list[str]) -> Check:
    seen = [f"{', '.join(dev_files)} present"] if dev_files else []
    if torch.count:
        seen.append(f"torch sees {_plural(torch.count, 'GPU')}")
    if not seen:
        return Check("GPUs", INFO, "no GPU: this machine benchmarks CPU slices (--devices cpu:N)")
    if torch.versions.get("hip"):  # AMD: NVML never applies; discovery needs the ids
        return Check(
            "GPUs",
            WARN,
            f"AMD GPUs ({'; '.join(seen)}): NVML checks do not apply",
            "check them with `rocm-smi`; give `jobs` the ids: --devices 0,1,...",
        )
    return Check(
        "GPUs",
        FAIL,
        f"{reason}, but {'; '.join(seen)}",
        "make `nvidia-smi` list the GPUs (install the driver's libnvidia-ml, matching "
        "the loaded kernel module, and a matching nvidia-ml-py): `jobs` finds GPUs "
        "through NVML",
    )


def _match(gpu: NvmlGpu, torch: TorchGPUs) -> dict[str, Any] | None:
    """torch's entry for an NVML GPU: by UUID, else by PCI bus id."""
    for d in torch.devices:
        if d.get("uuid") and d["uuid"].lower() == gpu.uuid.lower():
            return d
    for d in torch.devices:
        if d.get("pci_bus_id") and bus_id(d["pci_bus_id"]) == gpu.pci_bus_id:
            return d
    return None


def _agreement(gpus: list[NvmlGpu], torch: TorchGPUs) -> Check:
    seen = {g.index: _match(g, torch) for g in gpus}
    missing = [g for g in gpus if seen[g.index] is None]
    matched = {d.get("index") for d in seen.values() if d is not None}
    extra = [d for d in torch.devices if d.get("index") not in matched]
    if not missing and not extra:
        names = sorted({g.name for g in gpus})
        return Check(
            "GPUs",
            PASS,
            f"NVML and torch see the same {_plural(len(gpus), 'GPU')} "
            f"(by UUID and PCI bus): {', '.join(names)}",
        )
    parts = [f"NVML sees {len(gpus)}, torch {torch.count}"]
    parts += [f"torch lacks gpu{g.index} {g.uuid} at {g.pci_bus_id}" for g in missing]
    parts += [
        f"NVML lacks torch's cuda:{d.get('index')} {d.get('uuid') or d.get('pci_bus_id')}"
        for d in extra
    ]
    return Check(
        "GPUs",
        FAIL,
        "; ".join(parts),
        "a GPU that NVML lists but CUDA cannot open is often in a bad state: read "
        "`nvidia-smi -q`, reset it (`sudo nvidia-smi -r`) or reboot; MIG slices also "
        "show up this way",
    )


def _per_gpu(gpus: list[NvmlGpu], torch: TorchGPUs) -> list[Check]:
    """One line per GPU: what it is, and whether torch agrees on its name and memory."""
    checks = []
    for g in gpus:
        seen = _match(g, torch)
        detail = f"{g.name}, {_gib(g.memory)}, bus {g.pci_bus_id}, {g.uuid}"
        status, fix = PASS, None
        if seen is not None and seen.get("name") != g.name:
            status, fix = WARN, "driver and CUDA disagree on the model: update the driver"
            detail += f"; torch calls it {seen.get('name')}"
        elif (
            seen is not None and abs(seen.get("memory", 0) - g.memory) > MEMORY_TOLERANCE * g.memory
        ):
            status, fix = WARN, "is part of the GPU's memory taken (MIG, another context)?"
            detail += f"; torch sees {_gib(seen.get('memory', 0))}"
        checks.append(Check(f"gpu{g.index}", status, detail, fix))
    return checks


# -- versions --------------------------------------------------------------------------------
def cuda_version(value: int) -> tuple[int, int]:
    """NVML's CUDA driver version (13000) -> (13, 0)."""
    return value // 1000, value % 1000 // 10


def cudnn_text(value: int | None) -> str:
    """torch's cuDNN number -> "9.19.0" (cuDNN 9 packs M*10000+m*100+p, cuDNN 8 M*1000+...)."""
    if not value:
        return "none"
    major, rest = divmod(value, 10000 if value >= 90000 else 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def versions(nvml: Any, torch: TorchGPUs, gpus: list[NvmlGpu]) -> Check:
    """Driver, CUDA, cuDNN and NCCL; torch's CUDA must not be newer than the driver's."""
    if torch.error:
        return Check("versions", FAIL, torch.error, "`uv sync` (torch must import here)")
    v = torch.versions
    built = f"torch {v.get('torch')}"
    if not gpus:
        runtime = f"CUDA {v['cuda']}" if v.get("cuda") else "CPU build"
        return Check("versions", INFO, f"{built} ({runtime}); no GPU driver in use")
    try:
        driver = nvml_text(nvml.nvmlSystemGetDriverVersion())
        supports = cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion()))
    except Exception as err:
        return Check(
            "versions",
            FAIL,
            f"NVML cannot tell the driver version: {err}",
            "reinstall the NVIDIA driver",
        )
    detail = (
        f"driver {driver} (CUDA {supports[0]}.{supports[1]}); {built}: CUDA {v.get('cuda')}, "
        f"cuDNN {cudnn_text(v.get('cudnn'))}, NCCL {v.get('nccl') or 'none'}"
    )
    if not v.get("cuda"):
        return Check("versions", FAIL, detail, "torch is a CPU build: install a CUDA build")
    torch_cuda = tuple(int(x) for x in str(v["cuda"]).split(".")[:2])
    if torch_cuda[0] > supports[0]:
        return Check(
            "versions",
            FAIL,
            detail + ": torch's CUDA is newer than the driver supports",
            f"install a driver for CUDA {v['cuda']} or newer, or a torch built for "
            f"CUDA {supports[0]}.x",
        )
    if torch_cuda > supports:  # same major: CUDA's minor-version compatibility runs it, mostly
        return Check(
            "versions",
            WARN,
            detail + ": torch's CUDA is newer than the driver's "
            "(minor-version compatibility: no PTX JIT)",
            f"update the driver to one for CUDA {v['cuda']} or newer",
        )
    return Check("versions", PASS, detail)
