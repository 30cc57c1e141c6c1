"""How well a test used its device: FLOPs per example, achieved FLOP/s, percent of peak.

Examples/s compares runs of one test; it says nothing about how close a test gets to what the
hardware can do. ``helpers.train`` counts the FLOPs of one training step with torch's
``FlopCounterMode`` (matmul, conv and attention, forward and backward: the formulas count
nothing else, so the optimizer and element-wise ops add zero), multiplies the FLOPs per
example by the run's steady rate, and divides by the device's published dense peak for the
precision the step's matmuls really ran in.

The counted step is one extra step run *after* the timed loop: the counter intercepts every
op in Python, so a counted step inside the loop would distort the rate log, and one before
the loop would absorb the first step's start-up cost that ``startup.first_step`` reports.

No torch import at module level: ``milarun report`` must work on a machine without torch.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ENV_FLAG = "MILARUN_COUNT_FLOPS"  # "0" (or false/no/off) disables the counted step
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")

# Published dense peaks in TFLOP/s (no 2:4 sparsity). fp16/bf16/tf32 are the tensor/matrix
# core figures; fp32 is the plain (non-tensor) FP32 figure on NVIDIA and the FP32 matrix
# figure on AMD, whose GEMMs run FP32 on the matrix cores. None: not supported in hardware.
PEAKS: dict[str, dict[str, float | None]] = {
    # NVIDIA V100 datasheet (Tesla V100, 2020): SXM2 15.7 FP32, 125 tensor (FP16 in,
    # FP32 accumulate); PCIe 14 / 112; V100S PCIe 16.4 / 130. No TF32 or BF16 units.
    "V100-SXM2": {"fp32": 15.7, "tf32": None, "fp16": 125.0, "bf16": None},
    "V100-PCIe": {"fp32": 14.0, "tf32": None, "fp16": 112.0, "bf16": None},
    "V100S-PCIe": {"fp32": 16.4, "tf32": None, "fp16": 130.0, "bf16": None},
    # NVIDIA A100 datasheet (1758950-r4): the same for SXM4 and PCIe, 40GB and 80GB:
    # FP32 19.5, TF32 156, BF16 312, FP16 312 (the sparse figures are twice these).
    "A100-SXM": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
    "A100-PCIe": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
    # NVIDIA H100 datasheet: SXM FP32 67, TF32 989*, BF16/FP16 1979*; PCIe FP32 51,
    # TF32 756*, BF16/FP16 1513* (* with sparsity: "1/2 lower without sparsity").
    "H100-SXM": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
    "H100-PCIe": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.5, "bf16": 756.5},
    # NVIDIA H200 datasheet, H200 SXM: the H100 SXM compute (FP32 67, TF32 989*,
    # BF16/FP16 1979*, with sparsity), with more memory.
    "H200-SXM": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
    # AMD Instinct MI250X data sheet: per OAM package FP32 matrix 95.7, FP16/BF16 383;
    # no TF32. The package is two GCDs and each is its own torch device: half per device.
    "MI250X": {"fp32": 47.85, "tf32": None, "fp16": 191.5, "bf16": 191.5},
    # AMD Instinct MI300X data sheet: FP32 matrix 163.4, TF32 653.7, FP16/BF16 1307.4
    # (dense; 2614.9 with structured sparsity). One device in the default SPX mode.
    "MI300X": {"fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4},
}


def _has(pattern: str, name: str) -> bool:
    return re.search(pattern, name) is not None


def match_device(name: str | None) -> str | None:
    """The PEAKS row of a device name as NVML/torch spell it; None when unknown.

    Strict on purpose: a wrong row gives a confident wrong percentage, so variants whose
    peaks differ (H100/H200 NVL, GH200, MI300A, MI325X) and MIG slices stay unknown.
    """
    if not name:
        return None
    n = name.upper()
    if _has(r"\bMIG\b", n):
        return None  # a MIG instance has only a fraction of the GPU's units
    pcie, sxm = "PCIE" in n, "SXM" in n
    if _has(r"\bV100S\b", n):
        return "V100S-PCIe" if pcie else None
    if _has(r"\bV100\b", n):
        return "V100-SXM2" if "SXM2" in n else "V100-PCIe" if pcie else None
    if _has(r"\bA100\b", n):
        return "A100-SXM" if sxm else "A100-PCIe" if pcie else None
    if _has(r"\bH100\b", n):
        if "NVL" in n:
            return None
        return "H100-PCIe" if pcie else "H100-SXM" if sxm or "HBM3" in n else None
    if _has(r"\bH200\b", n):
        return None if "NVL" in n or pcie else "H200-SXM"
    if _has(r"\bMI250X\b", n):
        # ROCm may say "MI250X / MI250"; the MI250 (208 CUs, not 220) would be ~5% lower.
        return "MI250X"
    if _has(r"\bMI300X\b", n):
        return "MI300X"
    return None


def peak_flops(name: str | None, precision: str | None) -> float | None:
    """Published dense peak in FLOP/s for a device name and precision; None when unknown."""
    row = match_device(name)
    tflops = PEAKS[row].get(precision or "") if row else None
    return tflops * 1e12 if tflops else None


def percent_of_peak(
    name: str | None, precision: str | None, achieved: float | None
) -> float | None:
    """Achieved FLOP/s as a percentage of the device's peak; None when either is unknown."""
    peak = peak_flops(name, precision)
    if peak is None or achieved is None or not math.isfinite(achieved):
        return None
    return 100.0 * achieved / peak


# -- counting -------------------------------------------------------------------------
def enabled() -> bool:
    return os.environ.get(ENV_FLAG, "1").strip().lower() not in ("0", "false", "no", "off")


def steps_environments(step: Callable[..., Any]) -> bool:
    """True for a step defined in a module that uses gymnasium (cart, rl's PPO loop).

    Such a step plays environments: running one more of it would change the episodes, and
    its FLOPs per environment step would leave out the simulator. Detected from the step's
    module so the RL tests need no flag of their own.
    """
    names = {
        getattr(v, "__name__", "")
        for v in getattr(step, "__globals__", {}).values()
        if type(v).__name__ == "module"
    }
    return any(n.split(".")[0] in ("gymnasium", "gym") for n in names)


def _label(func: Any, args: tuple[Any, ...]) -> str:
    """The precision an op ran in: its first float input's dtype, tf32 where allowed."""
    import torch

    tensor = next((a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)
    if tensor is None:
        return "fp32"
    dtype = tensor.dtype
    if dtype in (torch.float16, torch.bfloat16):
        return "fp16" if dtype == torch.float16 else "bf16"
    if dtype == torch.float64:
        return "fp64"
    if dtype != torch.float32:
        return "fp8" if "float8" in str(dtype) else str(dtype).replace("torch.", "")
    if tf32_capable(tensor.device):
        conv = "conv" in str(func)
        allowed = (
            torch.backends.cudnn.allow_tf32
            if conv
            else torch.get_float32_matmul_precision() != "highest"
        )
        if allowed:
            return "tf32"
    return "fp32"


def tf32_capable(device: Any) -> bool:
    """Whether ``device`` runs "fp32" convolutions and matmuls as TF32 where torch allows
    it: an NVIDIA GPU of compute capability 8 (Ampere) or later. ROCm: not counted."""
    import torch

    return (
        getattr(device, "type", None) == "cuda"
        and torch.version.hip is None
        and torch.cuda.get_device_capability(device)[0] >= 8
    )


def count_step(step: Callable[[], Any]) -> dict[str, Any]:
    """Run ``step()`` once under FlopCounterMode: total FLOPs and FLOPs per precision."""
    import inspect
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    # torch < 2.12 has no skip_unsupported (it always skipped ops without a formula).
    options: dict[str, Any] = {"display": False}
    if "skip_unsupported" in inspect.signature(FlopCounterMode.__init__).parameters:
        options["skip_unsupported"] = True
    counter = FlopCounterMode(**options)
    by_precision: Counter[str] = Counter()

    class PrecisionMode(TorchDispatchMode):
        """Below the counter, so it sees the ops the counter counts (decomposed ones too)."""

        supports_higher_order_operators = True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = counter.flop_registry.get(getattr(func, "_overloadpacket", func))
            if formula is not None:
                by_precision[_label(func, args)] += formula(*args, **kwargs, out_val=out)
            return out

    with PrecisionMode(), counter:
        value = step()
    # torch < 2.12 does not list the ops it could not count: None, unknown.
    listed = getattr(counter, "get_unsupported_ops", None)
    return {
        "flops": int(counter.get_total_flops()),
        "by_precision": dict(by_precision),
        "unsupported": sorted(listed()) if listed is not None else None,
        "value": value,
    }


def device_name(device: Any) -> str:
    """The name NVML/torch give a GPU ("NVIDIA A100-SXM4-80GB"), else the device type."""
    if getattr(device, "type", None) == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return str(getattr(device, "type", device))


@dataclass(frozen=True)
class Efficiency:
    """The result's ``efficiency`` record; None where unknown, and ``note`` says why."""

    flops_per_example: float | None = None
    flops_per_step: int | None = None
    precision: str | None = None  # the precision most of the counted FLOPs ran in
    flops_by_precision: dict[str, int] | None = None
    achieved_flops: float | None = None  # FLOPs per example x the steady rate
    device_name: str | None = None
    peak_flops: float | None = None
    percent_of_peak: float | None = None
    note: str | None = None
    # The float32 settings in force after the run (precision_settings): whether "fp32"
    # convolutions and matmuls may have run as TF32, and cudnn's autotuning.
    settings: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "flops_per_example": self.flops_per_example,
            "flops_per_step": self.flops_per_step,
            "precision": self.precision,
            "flops_by_precision": self.flops_by_precision,
            "achieved_flops": self.achieved_flops,
            "device_name": self.device_name,
            "peak_flops": self.peak_flops,
            "percent_of_peak": self.percent_of_peak,
            "note": self.note,
            "settings": self.settings,
        }


def build_record(
    count: dict[str, Any], batch_size: int, steady_rate: float | None, device: str
) -> Efficiency:
    """The efficiency record from one counted step and the run's steady rate."""
    flops, by_precision = count["flops"], count["by_precision"]
    if flops <= 0:
        return Efficiency(
            device_name=device, note="no matmul/conv/attention FLOPs counted in the training step"
        )
    precision = max(by_precision, key=by_precision.get) if by_precision else "fp32"
    per_example = flops / batch_size
    achieved = per_example * steady_rate if steady_rate is not None else None
    notes = []
    if count["unsupported"]:
        notes.append(f"not counted (no formula): {', '.join(count['unsupported'])}")
    if achieved is None:
        notes.append("no steady rate: achieved FLOP/s unknown")
    peak = peak_flops(device, precision)
    if peak is None and achieved is not None:
        notes.append(f"no published {precision} peak for device {device!r}")
    return Efficiency(
        per_example,
        flops,
        precision,
        by_precision,
        achieved,
        device,
        peak,
        percent_of_peak(device, precision, achieved),
        "; ".join(notes) or None,
    )


def measure(
    exp: Any,
    step: Callable[[], Any],
    batch_size: int,
    log: Any,
    count: bool | None = None,
    keep: Callable[[Any], None] | None = None,
) -> Efficiency:
    """Count one extra ``step()`` after the timed loop and build the efficiency record.

    ``count``: None decides from MILARUN_COUNT_FLOPS and whether the step plays
    environments. Never raises an Exception: a step the counter cannot run only loses
    its FLOP count (KeyboardInterrupt and the harness's signals still go through).
    """
    settings = precision_settings(exp.device)
    if not enabled():
        return Efficiency(
            note=f"disabled by {ENV_FLAG}={os.environ.get(ENV_FLAG)}", settings=settings
        )
    if count is False or (count is None and steps_environments(step)):
        return Efficiency(
            note="not counted: the step plays environments, whose simulator "
            "FLOPs the counter cannot see",
            settings=settings,
        )
    try:
        counted = count_step(step)
        exp.sync()  # a device error of the counted step surfaces here, not later
        value = counted.pop("value")
        if keep is not None:  # the counted step is the last one: its value is the final one
            keep(value)
        record = build_record(counted, batch_size, log.steady_rate(), device_name(exp.device))
        return dataclasses.replace(record, settings=settings)
    except Exception as err:
        return Efficiency(
            note=f"FLOP counting failed: {type(err).__name__}: {err}"[:500], settings=settings
        )


def precision_settings(device: Any = None) -> dict[str, Any]:
    """torch's float32 and cuDNN settings as the test left them, and whether its device
    (None: unknown) runs TF32 at all. PyTorch's defaults let cuDNN run "fp32" convolutions
    and RNNs as TF32 on Ampere and later while matmuls stay fp32 (the 2020 V100 figures had
    no TF32 at all): a result says which applied."""
    import torch

    cudnn = torch.backends.cudnn
    return {
        "tf32_capable": None if device is None else tf32_capable(device),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(cudnn.allow_tf32),
        "cudnn_benchmark": bool(cudnn.benchmark),
        "cudnn_deterministic": bool(cudnn.deterministic),
    }
