"""gemm: dense matrix-multiply throughput, TFLOP/s: the measured peak beside the datasheet's.

The rate log times ``--repeat`` (32) products C = A @ B of two ``--size``-square (8192)
bf16 matrices per block, synced every block, made on the device: one example is 10^12
FLOPs (2 n^3 per product), so the rate is TFLOP/s. After it, each precision is timed on
the same square (fp16, bf16, tf32 = fp32 inputs with TF32 allowed, fp8 = e4m3 through
torch._scaled_mm where the GPU has it) and bf16 on the ``--sweep`` shapes (m x n x k: the
LLM's projections and smaller squares); each lands in the metrics as
``tflops_<precision>[_<m>x<n>x<k>]``, and what was skipped, with why, in
``efficiency.settings.skipped``. The report takes these as the device's measured peak (its
"% of measured peak" beside the datasheet's).
Modern suite: no 2020 counterpart.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from milabench import helpers, modern
from milarun.experiment import BadTestArguments, Experiment, fp8_dtype, precision_unavailable

TERA = 1e12
SWEEP = "2048x2048x2048,4096x4096x4096,16384x2048x2048,16384x5632x2048,16384x2048x5632"
PRECISIONS = ("bf16", "fp16", "tf32", "fp8")


def shapes(text: str) -> list[tuple[int, int, int]]:
    found = []
    for item in filter(None, text.split(",")):
        try:
            m, n, k = (int(x) for x in item.lower().split("x"))
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{item!r}: MxNxK, e.g. 4096x4096x4096") from err
        if min(m, n, k) < 1:
            raise argparse.ArgumentTypeError(f"{item!r}: sizes >= 1")
        found.append((m, n, k))
    return found


def operands(m: int, n: int, k: int, precision: str, device: Any, gen: Any) -> Any:
    """``product()`` for one m x n x k multiply in ``precision``."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    a = torch.randn(m, k, generator=gen, device=device).to(dtype)
    b = torch.randn(k, n, generator=gen, device=device).to(dtype)
    if precision != "fp8":
        return lambda: torch.matmul(a, b)
    fp8 = fp8_dtype(device)  # per architecture: MI300-class fnuz, MI355X and NVIDIA fn
    a8 = a.to(fp8)
    b8 = b.to(fp8).t().contiguous().t()  # column-major second operand, as _scaled_mm wants
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def time_product(exp: Experiment, product: Any, seconds: float) -> float:
    """Seconds per product, over at least ``seconds`` after one warm-up product."""
    product()
    exp.sync()
    count, start = 0, time.perf_counter()
    while True:
        product()
        count += 1
        if count & (count - 1) == 0:  # sync at powers of two only
            exp.sync()
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return elapsed / count


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=helpers.positive_int, default=8192)
    parser.add_argument(
        "--repeat", type=helpers.positive_int, default=32, help="products per timed block"
    )
    parser.add_argument("--sweep", type=shapes, default=shapes(SWEEP), help="MxNxK,...")
    parser.add_argument(
        "--seconds", type=float, default=1.0, help="time per precision and sweep shape"
    )
    parser.add_argument(
        "--precisions", default=",".join(PRECISIONS), help="of " + ", ".join(PRECISIONS)
    )
    args = exp.parse_args(parser, argv)
    wanted = [p for p in args.precisions.split(",") if p]
    bad = [p for p in wanted if p not in PRECISIONS]
    if bad or not args.seconds > 0:
        raise BadTestArguments(
            f"bad test argument: --precisions {args.precisions} (of {', '.join(PRECISIONS)})"
            if bad
            else f"bad test argument: --seconds {args.seconds} (> 0)"
        )
    device = helpers.setup(exp, args)
    exp.synthetic_data = True
    n = args.size
    size = f"{n}x{n}x{n} products"
    exp.arguments["workload"] = size
    torch.set_float32_matmul_precision("high")  # the tf32 product: fp32 inputs as TF32
    reasons = {p: precision_unavailable(p, device) for p in wanted}
    settings: dict[str, Any] = {
        "precision": "bf16",
        "tf32": True,
        "compile": False,
        "attention": None,
        "skipped": {p: why for p, why in reasons.items() if why},
    }
    gen = torch.Generator(device=device).manual_seed(args.seed)

    with modern.fits(exp, size, device):
        product = operands(n, n, n, "bf16", device, gen)
        per_block = args.repeat * 2 * n**3 / TERA

        def step() -> torch.Tensor:
            for _ in range(args.repeat):
                out = product()
            return out[0, 0].float()

        # Synced every block: the CPU queues a whole slice of products in a few ms, which
        # one sync a slice charged to the next slice (an H200: 1,309 and 11 TFLOP/s in
        # alternate slices, cv 98%); a block of 32 takes ~50 ms there.
        helpers.train(
            exp, step, per_block, metric="checksum", settings=settings, sync_each_step=True
        )
        for precision in (p for p in wanted if not reasons[p]):
            each = time_product(exp, operands(n, n, n, precision, device, gen), args.seconds)
            exp.metric(f"tflops_{precision}", 2 * n**3 / each / TERA)
        for m, nn, k in args.sweep:
            each = time_product(exp, operands(m, nn, k, "bf16", device, gen), args.seconds)
            exp.metric(f"tflops_bf16_{m}x{nn}x{k}", 2 * m * nn * k / each / TERA)
