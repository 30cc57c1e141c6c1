"""Inside the probe child: one CPU slice's GEMM and memory-bandwidth figures (numpy on the
BLAS: it imports in a tenth of torch's time, which counts on a starved slice of a busy node).

The child runs where `jobs` would run a CPU instance: in its student cgroup when one exists,
else pinned to the slice's CPUs; it records the isolation it really got (a misplaced group
shows as CPUs other than the plan's). Phases:
- ``cpu_gemm``: GFLOP/s of fp32 n x n x n products on the slice's threads (the parent sets
  the BLAS's thread count to the slice's CPUs);
- ``cpu_memory_bandwidth``: GB/s of copying a buffer larger than the caches (bytes read +
  bytes written per second).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from milarun.doctor.sampling import Recorder, sample_seconds
from milarun.measure.confinement import isolation_record

GIGA = 1e9
GEMM_SIZE = 512
COPY_BYTES = 256 * 2**20  # well beyond a socket's last-level cache


def _none() -> None:
    return None


def cpu_gemm(level: dict[str, float], n: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    seconds = sample_seconds(
        lambda: np.matmul(a, b, out=out), _none, int(level["samples"]), level["seconds"]
    )
    return {"unit": "GFLOP/s", "size": n, "samples": [2 * n**3 / s / GIGA for s in seconds]}


def cpu_memory_bandwidth(level: dict[str, float], size: int) -> dict[str, Any]:
    src = np.ones(size // 4, dtype=np.float32)
    dst = np.empty_like(src)
    seconds = sample_seconds(
        lambda: np.copyto(dst, src), _none, int(level["samples"]), level["seconds"] / 2
    )
    return {"unit": "GB/s", "bytes": size, "samples": [2 * size / s / GIGA for s in seconds]}


def measure(recorder: Recorder, spec: dict[str, Any], level: dict[str, float]) -> None:
    recorder.data["device"] = {"name": "cpu", "numpy": np.__version__}
    recorder.data["isolation"] = isolation_record()
    n = int(spec.get("gemm_size", GEMM_SIZE))
    recorder.phase("cpu_gemm", lambda: cpu_gemm(level, n))
    size = int(spec.get("copy_bytes", COPY_BYTES))
    recorder.phase("cpu_memory_bandwidth", lambda: cpu_memory_bandwidth(level, size))
