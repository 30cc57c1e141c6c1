"""`milarun doctor`'s GPU checks: the device backend (NVML, AMD SMI) and torch agree,
versions, each GPU's health.

Every reading goes through the backend it is given (milarun.machine.gpu) and a
:class:`~milarun.machine.gpuprobe.TorchGPUs`; nothing here imports torch or a vendor library.
"""

from __future__ import annotations

from typing import Any

from milarun.doctor.check import FAIL, INFO, PASS, WARN, Check
from milarun.machine.gpu import Backend, GpuInfo, built_for, bus_id, unloaded
from milarun.machine.gpuprobe import TorchGPUs

MEMORY_TOLERANCE = 0.02  # torch's total excludes what the driver reserves (~0.6% on an H100)


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# -- the backend and torch see the same GPUs ----------------------------------------------
def _tool(backend: Backend) -> str:
    return backend.list_tool


def inventory(
    backend: Backend, torch: TorchGPUs, dev_files: list[str]
) -> tuple[list[Check], list[GpuInfo]]:
    """Checks that the backend and torch see the same GPUs, and the backend's GPUs (empty:
    no GPU checks follow, because there is no GPU or the backend cannot read them)."""
    if not backend.usable:
        return [_without_backend(backend.reason, torch, dev_files, backend)], []
    label = backend.label
    try:
        gpus = backend.gpus()
    except Exception as err:  # a GPU fallen off the bus, a driver/library mismatch
        return [
            Check(
                "GPUs",
                FAIL,
                f"{label} cannot read its GPUs: {err}",
                f"{_tool(backend)} must list every GPU: reload the driver or reboot",
            )
        ], []
    if not gpus:
        alone = _without_backend(f"{label} sees no GPU", torch, dev_files, backend)
        return [alone], []
    if torch.error:  # the versions check fails with it: say it once
        names = ", ".join(sorted({g.name for g in gpus}))
        return [
            Check(
                "GPUs",
                INFO,
                f"{label} sees {_plural(len(gpus), 'GPU')} ({names}); what "
                "torch sees is unknown (see versions)",
            )
        ], gpus
    return [_agreement(gpus, torch, backend), *_per_gpu(gpus, torch)], gpus


def _without_backend(
    reason: str | None, torch: TorchGPUs, dev_files: list[str], backend: Backend
) -> Check:
    seen = [f"{', '.join(dev_files)} present"] if dev_files else []
    if torch.count:
        seen.append(f"torch sees {_plural(torch.count, 'GPU')}")
    if not seen:
        return Check("GPUs", INFO, "no GPU: this machine benchmarks CPU slices (--devices cpu:N)")
    vendor = unloaded(torch.versions, backend)  # its GPUs run by id, without its library
    if vendor is not None and vendor.unloaded_warning:
        said = vendor.unloaded_warning.format(seen="; ".join(seen), reason=reason)
        return Check("GPUs", WARN, said, vendor.library_fix)
    return Check("GPUs", FAIL, f"{reason}, but {'; '.join(seen)}", backend.unlisted_fix)


def _match(gpu: GpuInfo, torch: TorchGPUs) -> dict[str, Any] | None:
    """torch's entry for a backend's GPU: by UUID, else by PCI bus id."""
    for d in torch.devices:
        if d.get("uuid") and d["uuid"].lower() == gpu.uuid.lower():
            return d
    for d in torch.devices:
        if d.get("pci_bus_id") and bus_id(d["pci_bus_id"]) == gpu.pci_bus_id:
            return d
    return None


def _agreement(gpus: list[GpuInfo], torch: TorchGPUs, backend: Backend) -> Check:
    seen = {g.index: _match(g, torch) for g in gpus}
    missing = [g for g in gpus if seen[g.index] is None]
    matched = {d.get("index") for d in seen.values() if d is not None}
    extra = [d for d in torch.devices if d.get("index") not in matched]
    if not missing and not extra:
        names = sorted({g.name for g in gpus})
        return Check(
            "GPUs",
            PASS,
            f"{backend.label} and torch see the same {_plural(len(gpus), 'GPU')} "
            f"(by UUID and PCI bus): {', '.join(names)}",
        )
    parts = [f"{backend.label} sees {len(gpus)}, torch {torch.count}"]
    parts += [f"torch lacks gpu{g.index} {g.uuid} at {g.pci_bus_id}" for g in missing]
    parts += [
        f"{backend.label} lacks torch's cuda:{d.get('index')} "
        f"{d.get('uuid') or d.get('pci_bus_id')}"
        for d in extra
    ]
    return Check("GPUs", FAIL, "; ".join(parts), backend.unopenable_fix)


def _per_gpu(gpus: list[GpuInfo], torch: TorchGPUs) -> list[Check]:
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
def cudnn_text(value: int | None) -> str:
    """torch's cuDNN number -> "9.19.0" (cuDNN 9 packs M*10000+m*100+p, cuDNN 8 M*1000+...)."""
    if not value:
        return "none"
    major, rest = divmod(value, 10000 if value >= 90000 else 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def versions(backend: Backend, torch: TorchGPUs, gpus: list[GpuInfo]) -> Check:
    """The driver, torch's runtime (CUDA, HIP), cuDNN and the collective library (NCCL,
    RCCL), as the backend words them; torch must be built for the GPUs' vendor, and its
    runtime not newer than the driver's where the backend tells the driver's (CUDA)."""
    if torch.error:
        return Check("versions", FAIL, torch.error, "`uv sync` (torch must import here)")
    v = torch.versions
    built = f"torch {v.get('torch')}"
    if not gpus:
        build = built_for(v)
        runtime = f"{build.runtime_name} {v[build.torch_build]}" if build else "CPU build"
        return Check("versions", INFO, f"{built} ({runtime}); no GPU driver in use")
    try:
        driver = backend.driver()
        supports = backend.runtime_version()
    except Exception as err:
        return Check(
            "versions",
            FAIL,
            f"{backend.label} cannot tell the driver version: {err}",
            backend.driver_fix,
        )
    said = {k: v.get(k) for k in ("cuda", "hip")}
    detail = backend.versions_line.format(
        driver=driver,
        supports=".".join(map(str, supports or (0, 0))),
        built=built,
        cudnn=cudnn_text(v.get("cudnn")),
        nccl=v.get("nccl") or "none",
        **said,
    )
    ours = v.get(backend.torch_build)
    if not ours:
        return Check("versions", FAIL, detail, backend.build_fix)
    return _runtime_against_driver(detail, backend.runtime_name, str(ours), supports)


def _runtime_against_driver(
    detail: str, name: str, ours: str, supports: tuple[int, int] | None
) -> Check:
    """torch's runtime (``name`` ``ours``) against the newest the driver runs (``supports``;
    None: the backend does not tell, nothing to compare)."""
    if supports is None:
        return Check("versions", PASS, detail)
    runtime = tuple(int(x) for x in ours.split(".")[:2])
    if runtime[0] > supports[0]:
        return Check(
            "versions",
            FAIL,
            detail + f": torch's {name} is newer than the driver supports",
            f"install a driver for {name} {ours} or newer, or a torch built for "
            f"{name} {supports[0]}.x",
        )
    if runtime > supports:  # same major: the minor-version compatibility runs it, mostly
        return Check(
            "versions",
            WARN,
            detail + f": torch's {name} is newer than the driver's "
            "(minor-version compatibility: no PTX JIT)",
            f"update the driver to one for {name} {ours} or newer",
        )
    return Check("versions", PASS, detail)
    runtime = tuple(int(x) for x in ours.split(".")[:2])
    if runtime[0] > supports[0]:
        return Check(
            "versions",
            FAIL,
            detail + ": torch's CUDA is newer than the driver supports",
            f"install a driver for CUDA {ours} or newer, or a torch built for CUDA {supports[0]}.x",
        )
    if runtime > supports:  # same major: CUDA's minor-version compatibility runs it, mostly
        return Check(
            "versions",
            WARN,
            detail + ": torch's CUDA is newer than the driver's "
            "(minor-version compatibility: no PTX JIT)",
            f"update the driver to one for CUDA {ours} or newer",
        )
    return Check("versions", PASS, detail)
