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
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from milarun.machine import gpu
from milarun.machine.gpu.datasheet import (
    PEAKS,
    PRECISIONS,
    match_device,
    peak_flops,
    percent_of_peak,
)
from milarun.results.records import Efficiency

__all__ = [
    "PEAKS",
    "PRECISIONS",
    "Efficiency",
    "match_device",
    "measure",
    "peak_flops",
    "percent_of_peak",
]

ENV_FLAG = "MILARUN_COUNT_FLOPS"  # "0" (or false/no/off) disables the counted step
COUNTED = "counted: torch FlopCounterMode over one training step (matmul, conv, attention)"


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
    it: a GPU of its vendor's TF32 capability (NVIDIA's compute capability 8, Ampere, or
    later; ROCm: not counted, the backend's tf32_counted_from)."""
    if getattr(device, "type", None) != "cuda":
        return False
    import torch

    need = (gpu.built_for(torch.version) or gpu.Backend).tf32_counted_from
    return need is not None and tuple(torch.cuda.get_device_capability(device)) >= need


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
class Formula:
    """FLOPs per example from a test's own formula (the LLM's 6N + attention), instead of a
    counted step: ``method`` says which formula, ``precision`` the matmuls' precision."""

    flops_per_example: float
    precision: str
    method: str


def from_formula(
    formula: Formula, batch_size: int, steady_rate: float | None, device: str
) -> Efficiency:
    """The efficiency record of a test that states its FLOPs per example."""
    flops = formula.flops_per_example * batch_size
    count = {
        "flops": int(flops),
        "by_precision": {formula.precision: int(flops)},
        "unsupported": None,
    }
    record = build_record(count, batch_size, steady_rate, device)
    return dataclasses.replace(record, method=formula.method)


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
    formula: Formula | None = None,
    settings: dict[str, Any] | None = None,
) -> Efficiency:
    """Count one extra ``step()`` after the timed loop and build the efficiency record.

    ``count``: None decides from MILARUN_COUNT_FLOPS and whether the step plays
    environments. Never raises an Exception: a step the counter cannot run only loses
    its FLOP count (KeyboardInterrupt and the harness's signals still go through).
    ``formula``: the test's own FLOPs per example, no counted step; ``settings``: the
    test's own settings (precision, attention backend, compile), added to torch's.
    """
    settings = {**precision_settings(exp.device), **(settings or {})}
    if formula is not None:
        rate = log.steady_rate()
        return dataclasses.replace(
            from_formula(formula, batch_size, rate, device_name(exp.device)), settings=settings
        )
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
        return dataclasses.replace(record, settings=settings, method=COUNTED)
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
