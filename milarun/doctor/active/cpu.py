"""Inside the probe child: one CPU slice's GEMM and memory-bandwidth figures (numpy on the
BLAS: it imports in a tenth of torch's time, which counts on a starved slice of a busy node).

The child runs where `jobs` would run a CPU instance: in its student cgroup when one exists,
else pinned to the slice's CPUs; it records the isolation it really got (a misplaced group
shows as CPUs other than the plan's). Phases:
- ``cpu_gemm``: GFLOP/s of fp32 n x n x n products on the slice's threads (the parent sets
  the BLAS's thread count to the slice's CPUs);
- ``cpu_memory_bandwidth``: GB/s of copying a buffer larger than the caches (bytes read +
  bytes written per second).
Each phase also records ``others``: the share of the slice's CPUs other processes took
meanwhile (milarun.doctor.active.judge reads a slower slice with it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from milarun.doctor.active import fingerprint
from milarun.doctor.active.probe_recorder import Recorder, sample_seconds
from milarun.machine import monitors
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


def with_others(measure: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """``measure`` that also records ``others``: the share of this slice's CPUs that other
    processes (and the VM's host: steal) took meanwhile, so that a slice slower than its
    siblings says whether something else ran on it (the sibling test cannot tell)."""

    def measured() -> dict[str, Any]:
        load = monitors.OthersShare(sorted(os.sched_getaffinity(0)), time.process_time)
        found = measure()
        found["others"] = load.share()
        return found

    return measured


def measure(recorder: Recorder, spec: dict[str, Any], level: dict[str, float]) -> None:
    recorder.data["device"] = {"name": "cpu", "numpy": np.__version__}
    recorder.data["isolation"] = isolation_record().to_dict()
    n = int(spec.get("gemm_size", GEMM_SIZE))
    recorder.phase("cpu_gemm", with_others(lambda: cpu_gemm(level, n)))
    size = int(spec.get("copy_bytes", COPY_BYTES))
    recorder.phase("cpu_memory_bandwidth", with_others(lambda: cpu_memory_bandwidth(level, size)))
    recorder.phase("fingerprint", fingerprint.on_numpy)  # silent data corruption
