"""What the tests of the modern suite share (llm, bert, resnet50, vit, diffusion, llm_scaling,
gemm): bf16, TF32, torch.compile, the attention backend, the settings every result records,
and a size that does not fit its device as an ``oom`` failure.

Every setting lands in the result's ``efficiency.settings``, never implicit: the precision
and how it is applied (autocast: fp32 parameters, gradients and optimizer state, matmuls
in bf16), TF32, the SDPA kernel that runs for the test's attention shape, whether the
model was ``torch.compile``d and how long compiling took (as warm-up, outside the rate).

Models are built from configurations with random weights: the Hugging Face libraries are
told to stay offline, so a run never downloads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from milabench import helpers
from milarun.experiment import DoesNotFit, Experiment
from milarun.measure import efficiency

# Set before transformers/diffusers/timm are imported (each model imports them after this).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

PRECISIONS = ("bf16", "fp16", "fp32")
# The shipped modern profiles and the device memory (GiB) each is sized for.
PROFILES = (("modern", 75.0), ("modern-24gb", 22.0))
COMPILE_WARMUP_STEPS = 3  # compile forward, backward and the optimizer, then one more step
SDPA_OPS = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)",
    "_scaled_dot_product_efficient_attention": "memory-efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_fused_attention_overrideable": "fused (device backend)",
}


def add_arguments(parser: Any) -> None:
    """--precision (bf16 by default), --tf32 and --compile."""
    parser.add_argument(
        "--precision",
        default="bf16",
        choices=PRECISIONS,
        help="bf16 (default) or fp16 through torch.autocast, with fp32 parameters, "
        "gradients and optimizer state (fp16 adds a GradScaler); or plain fp32",
    )
    parser.add_argument(
        "--tf32",
        default="on",
        choices=("on", "off"),
        help="let the fp32 matmuls and convolutions left outside autocast run as TF32",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model (off by default); the compile time is warm-up, kept "
        "out of the rate and recorded (timings.compile, efficiency.settings)",
    )


class Setup:
    """One test's precision, TF32 state and compile choice, and the settings it records."""

    def __init__(self, exp: Experiment, args: Any, device: Any):
        import torch

        tf32 = args.tf32 == "on"
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        self.exp, self.device, self.compile = exp, device, bool(args.compile)
        self.precision = helpers.Precision(device, args.precision)
        how = (
            "fp32 parameters, gradients and optimizer state; no autocast"
            if self.precision.dtype is None
            else f"{args.precision} autocast: fp32 parameters, gradients and optimizer state, "
            f"matmuls, convolutions and attention in {args.precision}"
            + (", GradScaler" if self.precision.scaler is not None else "")
        )
        self.settings: dict[str, Any] = {
            "precision": args.precision,
            "mixed_precision": how,
            "tf32": tf32,
            "compile": self.compile,
            "compile_seconds": None,
            "attention": None,
        }
        exp.arguments["precision_used"] = args.precision

    @property
    def matmul_precision(self) -> str:
        """The precision the model's matmuls run in (fp32 as TF32 where allowed)."""
        name = self.settings["precision"]
        if name != "fp32" or not self.settings["tf32"] or self.device.type != "cuda":
            return name
        import torch

        return "tf32" if torch.cuda.get_device_capability(self.device)[0] >= 8 else "fp32"

    def autocast(self) -> Any:
        return self.precision.autocast()

    def backward(self, loss: Any, optimizer: Any) -> None:
        self.precision.backward(loss, optimizer)

    def stepper(
        self, loss_of: Callable[[Any], Any], optimizer: Any
    ) -> Callable[[Any], Callable[[], Any]]:
        """``net`` -> its training step: ``loss_of(net)`` under autocast, then the backward
        and the optimizer's step; one per model, so a compiled model and its eager twin
        (whose step the FLOPs are counted on) train alike."""

        def make(net: Any) -> Callable[[], Any]:
            def step() -> Any:
                with self.autocast():
                    loss = loss_of(net)
                optimizer.zero_grad(set_to_none=True)
                self.backward(loss, optimizer)
                return loss.detach()

            return step

        return make

    def maybe_compile(self, model: Any) -> Any:
        """``torch.compile(model)`` with --compile, else the model itself. The compiler's
        caches (inductor's graphs, Triton's kernels) live in the data folder, so a run
        compiles once per machine, not once per /tmp (a fresh one on every GPU lease)."""
        if not self.compile:
            return model
        import torch
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        caches = Path(self.exp.dataroot) / "cache"
        # torch writes its default into the variable once it has read it: that one is ours
        chosen = {
            "TORCHINDUCTOR_CACHE_DIR": (None, default_cache_dir()),
            "TRITON_CACHE_DIR": (None,),
        }
        for variable, name in (
            ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"),
            ("TRITON_CACHE_DIR", "triton"),
        ):
            if os.environ.get(variable) in chosen[variable]:
                try:
                    (caches / name).mkdir(parents=True, exist_ok=True)
                except OSError:  # a read-only data folder: the compiler's default
                    continue
                os.environ[variable] = str(caches / name)
        self.settings["compile_cache"] = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        return torch.compile(model)

    def _cache_use(self) -> dict[str, Any]:
        """What the compile found in its caches: graphs reused (hits) or compiled (misses);
        a warm cache compiled nothing."""
        from torch._dynamo.utils import counters

        found = {k: counters["inductor"][f"fxgraph_cache_{k}"] for k in ("hit", "miss", "bypass")}
        return {**found, "warm": found["hit"] > 0 and found["miss"] == 0}

    def record_attention(self, how: str, **shape: Any) -> None:
        """The attention implementation the model uses (``how``) and, for SDPA, the kernel
        that runs for ``shape`` (attention_backend's arguments) on this device."""
        self.settings["attention_impl"] = how
        self.settings["attention"] = attention_backend(self.device, **shape) if shape else how

    def train(
        self,
        step: Callable[[], Any],
        batch_size: int,
        formula: efficiency.Formula | None = None,
        eager_step: Callable[[], Any] | None = None,
    ) -> Any:
        """helpers.train with the settings recorded; with --compile, warm-up steps that
        compile first, timed as ``compile`` and left out of the rate log, and the FLOPs
        counted on ``eager_step`` (the same step through the uncompiled model). Each step
        syncs: a step is tens of ms or more on a GPU, and one sync a slice let a slice's
        rate swing with how the steps fell across it (llm on an H200: 40k/56k tokens/s in
        alternate slices, cv 14%)."""
        if self.compile:
            with self.exp.time("compile") as timer:
                for _ in range(COMPILE_WARMUP_STEPS):
                    step()
                self.exp.sync()
            self.settings["compile_seconds"] = round(timer.duration, 3)
            self.settings["compile_cache_use"] = self._cache_use()
        return helpers.train(
            self.exp,
            step,
            batch_size,
            formula=formula,
            settings=self.settings,
            counted_step=eager_step if self.compile else None,
            sync_each_step=True,
        )


def attention_backend(
    device: Any,
    heads: int,
    seq: int,
    head_dim: int,
    dtype: Any = None,
    causal: bool = False,
    kv_heads: int | None = None,
) -> str:
    """The SDPA kernel torch runs for this shape (flash, memory-efficient, cudnn or math):
    one call with gradients, under a dispatch mode that sees the op torch chose."""
    import torch
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)).split(".")[0])
            return func(*args, **(kwargs or {}))

    q = torch.randn(1, heads, seq, head_dim, device=device, dtype=dtype, requires_grad=True)
    kv = torch.randn(1, kv_heads or heads, seq, head_dim, device=device, dtype=dtype)
    options = {"enable_gqa": True} if kv_heads and kv_heads != heads else {}
    with Spy():
        F.scaled_dot_product_attention(q, kv, kv, is_causal=causal, **options)
    found = [SDPA_OPS[op] for op in seen if op in SDPA_OPS]
    return found[0] if found else "math"


# -- sizes that do not fit ---------------------------------------------------------------
def is_out_of_memory(err: BaseException) -> bool:
    """torch's OutOfMemoryError (CUDA, HIP), a failed CPU allocation, or MemoryError."""
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text.lower()
    )


def device_memory(device: Any) -> tuple[float, str]:
    """(GiB, label) of the memory this test's tensors live in."""
    kind = getattr(device, "type", None)
    if kind in ("cuda", "xpu"):  # CUDA and ROCm; Intel GPUs through torch.xpu
        import torch

        props = getattr(torch, kind).get_device_properties(device)
        return props.total_memory / 2**30, f"{device} ({props.name})"
    import psutil

    return psutil.virtual_memory().total / 2**30, "the host's RAM (cpu)"


def fitting_profile(gib: float, device_type: str = "cuda") -> str:
    """The shipped profile sized for a GPU of ``gib`` GiB (the quick one for a CPU: the
    modern profiles are sized for GPUs)."""
    if device_type == "cpu":
        return "quick"
    return next((name for name, need in PROFILES if gib >= need), "quick")


def oom_message(exp: Experiment, size: str, device: Any, err: BaseException) -> str:
    gib, label = device_memory(device)
    profile = fitting_profile(gib, getattr(device, "type", "cpu"))
    suite = exp.name.split(".")[0] if "." in exp.name else ""
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:240]
    advice = (
        "this is the profile sized for it: lower --batch-size"
        if suite == profile
        else f"the {profile} profile is sized for it"
    )
    return (
        f"{exp.name}: {size} does not fit in the {gib:.1f} GiB of {label} "
        f"({type(err).__name__}: {first}); {advice}"
    )


@contextlib.contextmanager
def fits(exp: Experiment, size: str, device: Any) -> Iterator[None]:
    """A size that runs out of the device's memory inside this block is DoesNotFit, the
    result's ``oom`` failure naming ``size`` and the profile sized for this device."""
    try:
        yield
    except DoesNotFit:
        raise
    except BaseException as err:
        if not is_out_of_memory(err):
            raise
        message = oom_message(exp, size, device, err)
        del err  # its frames hold the tensors that did not fit
        raise DoesNotFit(message) from None


def parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def billions(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.1f}M"
