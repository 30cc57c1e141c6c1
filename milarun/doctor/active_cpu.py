"""Inside the probe child (imports torch): one CPU slice's GEMM and memory-bandwidth figures.

The child runs where `jobs` would run a CPU instance: in its student cgroup when one exists,
else pinned to the slice's CPUs; it records the isolation it really got (a misplaced group
shows as CPUs other than the plan's). Phases:
- ``cpu_gemm``: GFLOP/s of fp32 n x n x n products on the slice's threads;
- ``cpu_memory_bandwidth``: GB/s of copying a buffer larger than the caches (bytes read +
  bytes written per second).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from milarun.doctor.probe import Recorder, sample_seconds
from milarun.measure.confinement import isolation_record

GIGA = 1e9
GEMM_SIZE = 512
COPY_BYTES = 256 * 2**20  # well beyond a socket's last-level cache


def _none() -> None:
    return None


def cpu_gemm(level: dict[str, float], n: int) -> dict[str, Any]:
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    out = torch.empty(n, n)
    seconds = sample_seconds(
        lambda: torch.matmul(a, b, out=out), _none, int(level["samples"]), level["seconds"]
    )
    return {"unit": "GFLOP/s", "size": n, "samples": [2 * n**3 / s / GIGA for s in seconds]}


def cpu_memory_bandwidth(level: dict[str, float], size: int) -> dict[str, Any]:
    src = torch.ones(size // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    seconds = sample_seconds(
        lambda: dst.copy_(src), _none, int(level["samples"]), level["seconds"] / 2
    )
    return {"unit": "GB/s", "bytes": size, "samples": [2 * size / s / GIGA for s in seconds]}


def measure(recorder: Recorder, spec: dict[str, Any], level: dict[str, float]) -> None:
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    recorder.data["device"] = {"name": "cpu", "torch": torch.__version__}
    recorder.data["isolation"] = isolation_record()
    n = int(spec.get("gemm_size", GEMM_SIZE))
    recorder.phase("cpu_gemm", lambda: cpu_gemm(level, n))
    size = int(spec.get("copy_bytes", COPY_BYTES))
    recorder.phase("cpu_memory_bandwidth", lambda: cpu_memory_bandwidth(level, size))
