"""`milarun doctor`'s GPU checks: NVML and torch agree, versions, each GPU's health.

Every reading goes through the NVML object it is given (pynvml, or a fake with the same
names) and a :class:`~milarun.machine.gpuprobe.TorchGPUs`; nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from milarun.machine.gpuprobe import TorchGPUs

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
INFO = "INFO"  # said for the operator's information, never a problem


@dataclass(frozen=True)
class Check:
    """One line of `milarun doctor` (every doctor check returns these; defined here, the
    lower of the two doctor modules, so both use it)."""

    name: str
    status: str  # PASS, WARN, FAIL or INFO
    detail: str
    fix: str | None = None  # what to do, for WARN and FAIL


# pynvml's constants, by their names there (a fake NVML need not define them).
NVML_CLOCK_SM = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_FEATURE_ENABLED = 1

MEMORY_TOLERANCE = 0.02  # torch's total excludes what the driver reserves (~0.6% on an H100)
HOT_MARGIN = 10  # degrees C under the slowdown threshold at which an idle GPU is too hot
RESET = "`sudo nvidia-smi -i {i} -r`"


@dataclass(frozen=True)
class NvmlGPU:
    index: int
    name: str
    uuid: str
    pci_bus_id: str  # normalised: 00000000:00:06.0
    memory: int  # bytes


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def bus_id(text: Any) -> str:
    """``0000:3b:00.0`` or ``00000000:3B:00.0`` -> ``00000000:3B:00.0`` (NVML and torch
    write the domain with 4 or 8 digits)."""
    text = _text(text).strip()
    try:
        domain, bus, rest = text.split(":")
        device, function = rest.split(".")
        return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{function}"
    except ValueError:
        return text.upper()


def read_gpus(nvml: Any) -> list[NvmlGPU]:
    """Every GPU NVML sees (all of them: NVML ignores CUDA_VISIBLE_DEVICES)."""
    gpus = []
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        gpus.append(
            NvmlGPU(
                i,
                _text(nvml.nvmlDeviceGetName(h)),
                _text(nvml.nvmlDeviceGetUUID(h)),
                bus_id(nvml.nvmlDeviceGetPciInfo(h).busId),
                int(nvml.nvmlDeviceGetMemoryInfo(h).total),
            )
        )
    return gpus


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# -- NVML and torch see the same GPUs ------------------------------------------------------
def inventory(
    nvml: Any, nvml_error: str | None, torch: TorchGPUs, dev_files: list[str]
) -> tuple[list[Check], list[NvmlGPU]]:
    """Checks that NVML and torch see the same GPUs, and NVML's GPUs (empty: no GPU checks
    follow, because there is no GPU or NVML cannot read them)."""
    if nvml is None:
        return [_without_nvml(nvml_error, torch, dev_files)], []
    try:
        gpus = read_gpus(nvml)
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


def _match(gpu: NvmlGPU, torch: TorchGPUs) -> dict[str, Any] | None:
    """torch's entry for an NVML GPU: by UUID, else by PCI bus id."""
    for d in torch.devices:
        if d.get("uuid") and d["uuid"].lower() == gpu.uuid.lower():
            return d
    for d in torch.devices:
        if d.get("pci_bus_id") and bus_id(d["pci_bus_id"]) == gpu.pci_bus_id:
            return d
    return None


def _agreement(gpus: list[NvmlGPU], torch: TorchGPUs) -> Check:
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


def _per_gpu(gpus: list[NvmlGPU], torch: TorchGPUs) -> list[Check]:
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


def versions(nvml: Any, torch: TorchGPUs, gpus: list[NvmlGPU]) -> Check:
    """Driver, CUDA, cuDNN and NCCL; torch's CUDA must not be newer than the driver's."""
    if torch.error:
        return Check("versions", FAIL, torch.error, "`uv sync` (torch must import here)")
    v = torch.versions
    built = f"torch {v.get('torch')}"
    if not gpus:
        runtime = f"CUDA {v['cuda']}" if v.get("cuda") else "CPU build"
        return Check("versions", INFO, f"{built} ({runtime}); no GPU driver in use")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
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


def health(nvml: Any, gpus: list[NvmlGPU]) -> list[Check]:
    """Each GPU's persistence, MIG, ECC, pending pages, clocks, power, PCIe link, heat."""
    checks = []
    for g in gpus:
        h = nvml.nvmlDeviceGetHandleByIndex(g.index)
        for topic, read in TOPICS:
            found = read(nvml, h, g.index)
            if found is not None:
                checks.append(Check(f"gpu{g.index} {topic}", *found))
    return checks
