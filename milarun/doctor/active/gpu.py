"""Inside the probe child (imports torch): one GPU's GEMM, memory and host-link figures.

Phases, each a list of samples (a CI needs several):
- ``gemm_<precision>``: TFLOP/s of an n x n x n product (2 n^3 FLOPs) at bf16, fp16, tf32
  (fp32 inputs, TF32 allowed) and fp8 (e4m3 through torch._scaled_mm, compute capability
  8.9+); a precision the device lacks is recorded as skipped with the reason.
- ``memory_bandwidth``: GB/s of a device-to-device copy of a large buffer (bytes read +
  bytes written per second).
- ``h2d``, ``d2h``: GB/s of copies from and to pinned host memory, one GPU at a time (the
  parent's lock file): GPUs behind one PCIe switch would otherwise share it.
- ``pattern``: a memory test over most of the free memory: fixed bit patterns and each
  word's own address written, read back and the mismatches counted;
- ``fingerprint`` (first): the silent-data-corruption fingerprint (doctor.active.fingerprint).
The spec's ``device`` may be ``cpu`` (the tests' way to run this code without a GPU): the
formats the CPU lacks are skipped with the reason, as on a GPU without them.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch

from milarun.doctor.active import fingerprint
from milarun.doctor.active.probe_recorder import Recorder, sample_seconds
from milarun.machine.gpu import runtime_version
from milarun.machine.torchdevice import fp8_dtype, precision_unavailable

TERA, GIGA = 1e12, 1e9
PRECISIONS = ("bf16", "fp16", "tf32", "fp8")
GEMM_SIZE = 8192
PATTERNS = (0x5555555555555555, -0x5555555555555556, 0, -1)  # 0101.., 1010.., 0s, 1s
CHUNK = 2**30  # bytes of one block of the memory test


def product(precision: str, n: int, device: torch.device) -> Any:
    """One n x n x n product in ``precision``, as a function of no argument."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, generator=gen, device=device)
    b = torch.randn(n, n, generator=gen, device=device)
    if precision == "fp8":
        kind = fp8_dtype(device)  # per architecture (machine.gpu.datasheet)
        a8, b8 = a.to(kind), b.to(kind).t().contiguous().t()  # b column-major
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    if precision == "tf32":
        torch.set_float32_matmul_precision("high")  # fp32 inputs multiplied as TF32
        return lambda: torch.matmul(a, b)
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    a, b = a.to(half), b.to(half)
    return lambda: torch.matmul(a, b)


def _sync(device: torch.device) -> Any:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def gemm(precision: str, device: torch.device, level: dict[str, float], n: int) -> dict[str, Any]:
    reason = precision_unavailable(precision, device)
    if reason:
        return {"skipped": reason}
    seconds = sample_seconds(
        product(precision, n, device), _sync(device), int(level["samples"]), level["seconds"]
    )
    return {"unit": "TFLOP/s", "size": n, "samples": [2 * n**3 / s / TERA for s in seconds]}


def _free(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    import psutil

    return int(psutil.virtual_memory().available)


def memory_bandwidth(device: torch.device, level: dict[str, float], cap: int) -> dict[str, Any]:
    size = max(2**20, min(cap, _free(device) // 8)) // 4 * 4
    src = torch.ones(size // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    seconds = sample_seconds(
        lambda: dst.copy_(src), _sync(device), int(level["samples"]), level["seconds"] / 2
    )
    return {"unit": "GB/s", "bytes": size, "samples": [2 * size / s / GIGA for s in seconds]}


@contextmanager
def _one_at_a_time(lock: str | None) -> Any:
    if not lock:
        yield
        return
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def host_link(
    device: torch.device, level: dict[str, float], size: int, lock: str | None
) -> dict[str, Any]:
    """Both directions through pinned host memory (only a CUDA device has them), one GPU
    at a time (``lock``)."""
    if device.type != "cuda":
        return {"skipped": f"no host link to measure: the device is {device.type}"}
    host = torch.ones(size // 4, dtype=torch.float32).pin_memory()
    dev = torch.empty(size // 4, dtype=torch.float32, device=device)
    sync = _sync(device)
    found = {}
    with _one_at_a_time(lock):
        for name, op in (
            ("h2d", lambda: dev.copy_(host, non_blocking=True)),
            ("d2h", lambda: host.copy_(dev, non_blocking=True)),
        ):
            seconds = sample_seconds(op, sync, int(level["link_samples"]), level["link_seconds"])
            found[name] = {
                "unit": "GB/s",
                "bytes": size,
                "samples": [size / s / GIGA for s in seconds],
            }
    return found


def pattern_test(device: torch.device, level: dict[str, float], limit: int) -> dict[str, Any]:
    """Fill most of the free memory in blocks with each pattern, read it back, count
    the 64-bit words that differ. ``limit``: at most this many bytes (the tests' bound)."""
    start = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the earlier phases' buffers, cached: free them to test them
    want = min(limit, int(_free(device) * level["pattern_share"]) - 2 * CHUNK)
    want = max(want, min(limit, 2**20))
    words = min(CHUNK, want) // 8
    spare = torch.empty(words, dtype=torch.int64, device=device)
    blocks: list[torch.Tensor] = []
    try:
        while (len(blocks) + 1) * words * 8 <= want:
            blocks.append(torch.empty(words, dtype=torch.int64, device=device))
    except (torch.OutOfMemoryError, RuntimeError):
        pass  # test what could be had; the bytes tested say how much
    errors, passes = 0, 0
    for _ in range(int(level["pattern_rounds"])):
        for value in (*PATTERNS, None):  # None: each word holds its own index
            for i, block in enumerate(blocks):
                if value is None:
                    torch.arange(i * words, (i + 1) * words, out=block)
                else:
                    block.fill_(value)
            for i, block in enumerate(blocks):
                if value is None:
                    torch.arange(i * words, (i + 1) * words, out=spare)
                else:
                    spare.fill_(value)
                errors += int((block != spare).sum().item())
            passes += 1
    tested = sum(b.numel() * 8 for b in blocks)
    del blocks, spare
    return {
        "bytes": tested,
        "passes": passes,
        "errors": errors,
        "seconds": time.perf_counter() - start,
    }


def measure(recorder: Recorder, spec: dict[str, Any], level: dict[str, float]) -> None:
    device = torch.device(spec.get("device", "cuda:0"))
    n = int(spec.get("gemm_size", GEMM_SIZE))
    if device.type == "cuda":
        torch.cuda.set_device(device)
        props = torch.cuda.get_device_properties(device)
        recorder.data["device"] = {
            "name": props.name,
            "capability": list(torch.cuda.get_device_capability(device)),
            "memory": int(props.total_memory),
            "torch": torch.__version__,
            "cuda": runtime_version(torch.version),
        }
    else:
        recorder.data["device"] = {"name": "cpu", "torch": torch.__version__}
    # first: no cuBLAS handle yet, so the deterministic workspace it asks for is the one made
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    recorder.phase("fingerprint", lambda: fingerprint.on_torch(device))
    for precision in PRECISIONS:
        recorder.phase(f"gemm_{precision}", partial(gemm, precision, device, level, n))
    torch.set_float32_matmul_precision("highest")
    cap = int(spec.get("copy_bytes", 4 * 2**30))
    recorder.phase("memory_bandwidth", lambda: memory_bandwidth(device, level, cap))
    link = partial(host_link, device, level, min(cap, 2**30), spec.get("lock"))
    recorder.phase("host_link", link)
    limit = int(spec.get("pattern_bytes", 2**62))
    recorder.phase("pattern", lambda: pattern_test(device, level, limit))
    if device.type == "cuda":
        recorder.data["device"]["memory_free_after"] = _free(device)
