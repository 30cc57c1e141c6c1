"""What every benchmark shares: seeding, the device, and the timed training loop."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

from milabench import distributed
from milarun.experiment import Experiment
from milarun.measure import efficiency


def seed_everything(seed: int) -> None:
    import numpy
    import torch

    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def setup(exp: Experiment, args: Any, device: Any = None) -> Any:
    """Seed the generators and return the instance's torch device, or ``device`` for a test
    that trains there whatever its slot (cart: the CPU), so its rate log syncs that device
    and never creates a CUDA context on the slot's GPU."""
    seed_everything(args.seed)
    if device is not None:
        exp.use_device(device)
    return exp.device


def train(
    exp: Experiment,
    step: Callable[..., Any],
    batch_size: int,
    metric: str = "loss",
    count_flops: bool | None = None,
    fetch: Callable[[], Any] | None = None,
    examples: Callable[[], int] | None = None,
    formula: efficiency.Formula | Callable[[], efficiency.Formula] | None = None,
    settings: dict[str, Any] | None = None,
    counted_step: Callable[[], Any] | None = None,
    sync_each_step: bool = False,
) -> Any:
    """Run ``step()`` (one iteration of ``batch_size`` examples) until the run has measured
    enough: ``--max-count`` examples if given, and ``--min-slices`` slices (RateLog.done;
    under torchrun every rank stops after the same step).

    With ``fetch``, each step is ``step(fetch())``, ``fetch`` called outside the timed block
    (a test whose legacy loop loaded its batch untimed: translator); without it, a step
    loads its own batch inside the block, as the legacy ``dataloop`` did.

    Each call is one timed block of ``batch_size`` examples in the ``train`` rate log, or of
    ``examples()`` read after the step (a test that counts what each step really held, as
    its legacy did: vae's last, partial batch of an epoch); the value of the last step is
    recorded as ``metric`` once the loop ends (reading it earlier would sync the device).
    One extra, untimed step is run under a FLOP counter for the result's efficiency first
    (and gives the recorded value when it ran)
    (``count_flops``: None decides automatically, see milarun.measure.efficiency.measure).
    ``formula``: the test's own FLOPs per example instead (no counted step; a function: made
    once the loop ends, from what the steps saw: translator's lengths); ``settings``:
    the test's own settings for ``efficiency.settings``; ``counted_step``: the step to
    count instead of ``step`` (the eager twin of a torch.compile'd one);
    ``sync_each_step``: sync the device after every step (RateLog.sync_each_block), for
    steps of tens of ms and more whose work the CPU queues far ahead (the modern suite).
    """
    log = exp.rate_log("train", sync_each_block=sync_each_step)
    stop = distributed.stop_rule()
    value = None
    with exp.time("train_loop"):
        while not stop(log):
            batch = () if fetch is None else (fetch(),)
            block = log.block(batch_size)
            with block:
                value = step(*batch)
                if examples is not None:
                    block.count = examples()
    log.finish()
    last = [value]
    counted = step if fetch is None else (lambda: step(fetch()))
    if counted_step is not None:
        counted = counted_step
    # The counted step trains once more; metrics the test records after this function
    # describe that step, so the loss recorded here comes from it too.
    exp.set_efficiency(
        efficiency.measure(
            exp,
            counted,
            batch_size,
            log,
            count_flops,
            keep=lambda v: last.__setitem__(0, v),
            formula=formula() if callable(formula) else formula,
            settings=settings,
        )
    )
    value = last[0]
    if value is not None:
        exp.metric(metric, value.item() if hasattr(value, "item") else value)
    return value


def positive_int(text: str) -> int:
    """argparse ``type=`` for sizes and counts: an integer >= 1 (else a one-line error)."""
    import argparse

    try:
        value = int(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from err
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} (must be >= 1)")
    return value


# -- data ---------------------------------------------------------------------------
def default_workers() -> int:
    """DataLoader workers: the instance's CPUs minus one for the training loop (max 8)."""
    import os

    return max(0, min(8, len(os.sched_getaffinity(0)) - 1))


def add_data_arguments(parser: Any, workers: int | None = None) -> None:
    """--workers (DataLoader processes) for tests that read files."""
    parser.add_argument(
        "--workers",
        type=int,
        default=default_workers() if workers is None else workers,
        help="DataLoader worker processes (default: "
        + ("the instance's CPUs - 1)" if workers is None else f"{workers})"),
    )


def data_loader(
    dataset: Any,
    batch_size: int,
    workers: int,
    shuffle: bool = True,
    collate_fn: Any = None,
    seed: int = 0,
    batch_sampler: Any = None,
    legacy_epochs: bool = False,
) -> Any:
    """A DataLoader with full batches only, seeded shuffling, pinned memory on GPUs
    (``batch_sampler``: the test's own batches of indices instead; ``seed`` still seeds
    the workers), its worker processes kept from one epoch to the next.

    ``legacy_epochs``: as the 2020 loaders (a plain ``DataLoader`` cycled over): every epoch
    forks its workers anew and ends with its last, partial batch. On a small set (reso's
    200 images) that is much of the measured work.
    """
    import torch

    if len(dataset) < batch_size and not legacy_epochs:
        raise ValueError(
            f"dataset has {len(dataset)} examples, fewer than one batch of "
            f"{batch_size}: make a bigger one (milarun dataset ... --size)"
        )
    generator = torch.Generator().manual_seed(seed)
    batching = (
        {"batch_sampler": batch_sampler}
        if batch_sampler is not None
        else {"batch_size": batch_size, "shuffle": shuffle, "drop_last": not legacy_epochs}
    )
    return torch.utils.data.DataLoader(
        dataset,
        num_workers=workers,
        collate_fn=collate_fn,
        generator=generator,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=workers > 0 and not legacy_epochs,
        # the workers fork, as the 2020 tests' did (Python 3.14 makes forkserver the default)
        multiprocessing_context="fork" if workers > 0 else None,
        **batching,
    )


def endless(loader: Any) -> Any:
    """Batches forever: a run is bounded by --max-count, not by epochs (a new iterator, so
    new workers unless they persist, at each epoch)."""
    while True:
        yield from loader


def built_on(device: Any) -> Any:
    """The context to create a model in: its parameters made and initialised on the device
    it trains on (same layers, initialisation distributions and seed; not on the CPU, then
    copied, which made a GPU wait for the CPU's initialisation of every weight)."""
    import torch

    return torch.device(device)


def to_device(obj: Any, device: Any) -> Any:
    """Tensors (inside lists, tuples and dicts too) moved to ``device``."""
    if hasattr(obj, "to"):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def use_dataset(exp: Experiment, folder: Any) -> None:
    """Record in the result the dataset the test reads from ``folder``: its name, size and
    whether it was synthetic (the result's ``dataset`` and ``synthetic_data``)."""
    from milabench import datasets

    found = datasets.summary(folder, exp.dataroot)
    if found is None:  # the loaders require finished data first; nothing to record
        return
    exp.use_dataset(found["name"], found["size"], found["synthetic"])


# -- mixed precision ----------------------------------------------------------------
PRECISIONS = ("fp32", "fp16", "bf16", "auto")


# oneDNN's ISA caps (ONEDNN_MAX_CPU_ISA) under which it still runs bf16 (or fp16) in the
# CPU's own instructions; below them it converts to fp32 and back (emulated: many times
# slower). Names of oneDNN 3.x, old and new spellings.
_BF16_CAPS = frozenset(
    {"AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10_1_512", "AVX512_CORE_AMX", "AVX10_1_512_AMX"}
)
_FP16_CAPS = frozenset({"AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX_FP16"})
_NO_CAP = frozenset({"", "ALL", "DEFAULT"})


def cpu_native(name: str) -> bool:
    """Whether this CPU runs ``name`` (bf16 or fp16) natively: its instructions
    (avx512_bf16 or AMX for bf16, AMX-FP16 for fp16) and oneDNN's cap allowing them.
    ``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` is no answer: it says yes on every
    AVX-512 CPU, where bf16 is emulated."""
    import torch

    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if name == "bf16":
        has = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
        return has and (cap in _NO_CAP | _BF16_CAPS | _FP16_CAPS)
    if name == "fp16":
        return torch.cpu._is_amx_fp16_supported() and cap in _NO_CAP | _FP16_CAPS
    return name == "fp32"


class Precision:
    """torch.autocast + GradScaler for one device and precision.

    ``auto`` is fp16 on CUDA; on a CPU the half precision it runs natively (bf16, else
    fp16: cpu_native), else fp32, as emulated half precision is slower than fp32.
    Training steps call :meth:`backward` so the scaler is applied.
    """

    def __init__(self, device: Any, name: str = "fp32"):
        import torch

        if name not in PRECISIONS:
            raise ValueError(f"--precision {name!r}: use one of {', '.join(PRECISIONS)}")
        if name == "auto":
            if device.type == "cuda":
                name = "fp16"
            else:
                name = next(n for n in ("bf16", "fp16", "fp32") if cpu_native(n))
        self.name = name
        self.device_type = device.type
        self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(name)
        # fp16 gradients underflow without loss scaling; bf16 has fp32's range.
        self.scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None

    def autocast(self) -> Any:
        import contextlib

        import torch

        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: Any, optimizer: Any, clip_norm: float | None = None) -> None:
        """backward, optional gradient-norm clipping, step: through the scaler when there
        is one (gradients are unscaled first so the clip applies to their true norm)."""
        import torch

        params = [p for group in optimizer.param_groups for p in group["params"]]
        if self.scaler is None:
            loss.backward()
            if clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(params, clip_norm)
            optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            if clip_norm is not None:
                self.scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(params, clip_norm)
            self.scaler.step(optimizer)
            self.scaler.update()


def add_precision_argument(parser: Any, default: str = "fp32") -> None:
    parser.add_argument(
        "--precision",
        default=default,
        choices=PRECISIONS,
        help="fp32, or mixed precision with torch.autocast (auto: fp16 on "
        "CUDA, bf16 on CPUs that support it, else fp16)",
    )


def reject(problems: list[str]) -> None:
    """One BadTestArguments naming every bad value (one line, so the result's failure
    message says all there is to fix at once); nothing when ``problems`` is empty."""
    if problems:
        from milarun.experiment import BadTestArguments

        raise BadTestArguments("bad test argument: " + "; ".join(problems))
