"""The torch side of an instance's device, inside a benchmark process: which torch.device it
trains on (a torchrun rank's CUDA opened on its own GPU only; an Intel GPU through torch.xpu
where there is no CUDA or ROCm) and how to wait for its work."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from milarun.machine import devices, gpu
from milarun.machine.gpu import datasheet

# Level Zero's visible-devices variable (Intel GPUs): the GPUs torch.xpu sees, read once when
# it initialises; `jobs` names an instance's GPUs in CUDA_VISIBLE_DEVICES, copied there.
XPU_VISIBLE = "ZE_AFFINITY_MASK"


def torch_device() -> Any:
    """The torch.device this instance trains on."""
    import torch

    label = devices.instance_device_label()
    if not label.startswith(devices.GPU_KIND):
        return torch.device("cpu")
    rank = os.environ.get("LOCAL_RANK")
    # Before anything asks CUDA about its devices: that fixes which ones it sees.
    own = rank is not None and open_own_gpu(torch.cuda, int(rank))
    if not torch.cuda.is_available():
        xpu = xpu_device(torch, int(rank or 0))
        if xpu is not None:
            return xpu
        # Never report a CPU run as a GPU result.
        raise RuntimeError(
            f"this instance was given GPU {label} (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}) but torch sees no GPU; "
            "use --devices cpu:N on a machine without GPUs"
        )
    if own:
        return torch.device("cuda", 0)  # the only GPU this rank's CUDA sees
    # Under torchrun (CUDA opened before this call) each rank owns the visible GPU of its
    # LOCAL_RANK; else the first one.
    local_rank = int(rank or 0)
    if local_rank >= torch.cuda.device_count():
        raise RuntimeError(
            f"rank with LOCAL_RANK={local_rank} has no GPU of its own: only "
            f"{torch.cuda.device_count()} visible (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}); launch one process per GPU"
        )
    return torch.device("cuda", local_rank)


def xpu_device(torch: Any, local_rank: int = 0, environ: Any = None) -> Any:
    """The Intel GPU (torch.xpu) of this instance where torch has no CUDA or ROCm GPU, else
    None. Before torch.xpu first looks, ZE_AFFINITY_MASK is set to the instance's GPUs (its
    CUDA_VISIBLE_DEVICES indices) unless the operator set it: the instance sees its own GPUs
    only, and its result's environment records the mask."""
    env = os.environ if environ is None else environ
    xpu = getattr(torch, "xpu", None)
    if xpu is None:
        return None
    visible = devices.visible_ids(env)
    if XPU_VISIBLE not in env and visible and all(x.isdigit() for x in visible):
        env[XPU_VISIBLE] = ",".join(visible)
    if not xpu.is_available() or local_rank >= xpu.device_count():
        return None
    return torch.device("xpu", local_rank)


def open_own_gpu(cuda: Any, local_rank: int, environ: Any = None) -> bool:
    """Initialise CUDA in a torchrun rank with only the rank's own GPU visible; True if done.

    torchrun gives every rank the same CUDA_VISIBLE_DEVICES (all K GPUs of the job); the
    legacy scaling launcher gave each rank its own one (``CUDA_VISIBLE_DEVICES=<i>``), so
    a rank's CUDA, and NCCL through it, saw no peer GPU. CUDA reads the variable once, when
    it initialises: it is narrowed to the rank's entry for that moment and then restored, so
    the harness still records and monitors the instance's K GPUs (each rank's ``ranks``
    entry says how many its CUDA saw). ``cuda`` is ``torch.cuda``. False, with nothing
    changed, where CUDA was already initialised or the rank has no entry of its own.
    """
    env = os.environ if environ is None else environ
    if cuda.is_initialized():
        return False
    visible = devices.visible_ids(env)
    if visible is None:  # every GPU, in CUDA's order: the rank's is its index there
        own = str(local_rank)
    elif local_rank < len(visible):
        own = visible[local_rank]
    else:
        return False  # torch_device says why
    saved = env.get("CUDA_VISIBLE_DEVICES")
    env["CUDA_VISIBLE_DEVICES"] = own
    try:
        cuda.init()
        cuda.device_count()  # torch keeps the count of an initialised CUDA from now on
    except RuntimeError:  # no usable GPU: torch_device reports it
        return False
    finally:
        if saved is None:
            env.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            env["CUDA_VISIBLE_DEVICES"] = saved
    return True


def synchronizer(device: Any) -> Callable[[], None]:
    """A function that waits for the device's queued work (CUDA and ROCm share the API)."""
    kind = getattr(device, "type", str(device))
    if kind == "cuda":
        import torch

        return lambda: torch.cuda.synchronize(device)
    if kind == "xpu":
        import torch

        return lambda: torch.xpu.synchronize(device)
    return lambda: None  # CPU kernels complete before they return


def precision_unavailable(precision: str, device: Any) -> str | None:
    """Why matrix products in ``precision`` (bf16, fp16, tf32, fp8) cannot run on ``device``
    (None: they can): the gemm test and `doctor --active` skip it with this reason."""
    import torch

    if precision in ("bf16", "fp16"):
        return None
    if device.type != "cuda":
        return f"{precision} is a GPU tensor-core format; this device is {device.type}"
    capability = tuple(torch.cuda.get_device_capability(device))
    vendor = gpu.built_for(torch.version) or gpu.Backend
    if precision == "tf32":
        need = vendor.tf32_runs_from
        return None if capability >= need else f"TF32 needs compute capability {_dotted(need)}+"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return "this torch has no torch._scaled_mm"
    if capability < vendor.fp8_runs_from:
        return (
            f"FP8 needs compute capability {_dotted(vendor.fp8_runs_from)}+; "
            f"this GPU is {_dotted(capability)}"
        )
    return None


def _dotted(capability: tuple[int, ...]) -> str:
    return ".".join(map(str, capability))


def fp8_dtype(device: Any) -> Any:
    """The torch dtype of ``device``'s FP8 e4m3 format, per architecture from the datasheet
    (MI300-class ``float8_e4m3fnuz``; MI355X and NVIDIA ``float8_e4m3fn``); a GPU with no
    row takes its runtime's (ROCm before CDNA 4: fnuz)."""
    import torch

    vendor = (gpu.built_for(torch.version) or gpu.Backend).vendor
    name = datasheet.fp8_format(torch.cuda.get_device_name(device), vendor)
    return getattr(torch, name or "float8_e4m3fn")
