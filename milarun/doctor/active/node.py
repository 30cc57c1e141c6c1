"""Inside the probe child (imports torch): the node's GPUs together, on a node with two or more.

Phases:
- ``p2p``: for each pair of GPUs (quick: one way, full: both ways), whether CUDA gives peer
  access and the GB/s of a device-to-device copy between them (a pair without peer access,
  or much slower than the other pairs, is a missing NVLink or a P2P fallback through host
  memory);
- ``nccl``: NCCL all-reduce bus bandwidth over every GPU (one process per GPU, the
  nccl-tests definition: bytes x 2(n-1)/n per second) and the transports NCCL chose, read
  from its own log (``NET/Socket`` between GPUs of one node is a fallback).
"""

from __future__ import annotations

import os
import re
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import torch

from milarun.doctor.active.sampling import Recorder, sample_seconds

GIGA = 1e9
P2P_BYTES = 256 * 2**20
NCCL_BYTES = 256 * 2**20
VIA = re.compile(r"\bvia (\S+)")


def p2p(level: dict[str, float], size: int) -> dict[str, Any]:
    n = torch.cuda.device_count()
    pairs = {}
    for i in range(n):
        src = torch.ones(size // 4, device=f"cuda:{i}")
        for j in range(n):
            if i == j or (j < i and not level["p2p_both_ways"]):
                continue
            dst = torch.empty(size // 4, device=f"cuda:{j}")

            def sync(i: int = i, j: int = j) -> None:
                torch.cuda.synchronize(i)
                torch.cuda.synchronize(j)

            seconds = sample_seconds(
                partial(dst.copy_, src, non_blocking=True),
                sync,
                int(level["p2p_samples"]),
                level["p2p_seconds"],
            )
            pairs[f"{i}-{j}"] = {
                "peer_access": bool(torch.cuda.can_device_access_peer(i, j)),
                "unit": "GB/s",
                "bytes": size,
                "samples": [size / s / GIGA for s in seconds],
            }
            del dst
    return {"pairs": pairs}


def _rank(
    rank: int, world: int, init: str, level: dict[str, float], size: int, out: str, backend: str
) -> None:
    """One rank of the all-reduce. Every rank must run the same number of collectives: the
    repetitions are agreed (the slowest rank's calibration) and the sample count is fixed."""
    import time

    import torch.distributed as dist

    gpu = backend == "nccl"
    if gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    device = torch.device(f"cuda:{rank}" if gpu else "cpu")
    x = torch.ones(size // 4, device=device)

    def sync() -> None:
        if gpu:
            torch.cuda.synchronize(rank)

    def burst(reps: int) -> float:
        start = time.perf_counter()
        for _ in range(reps):
            dist.all_reduce(x)
        sync()
        spent = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
        dist.all_reduce(spent, op=dist.ReduceOp.MAX)  # the same on every rank
        return float(spent.item())

    seconds = level["seconds"] / 2
    burst(1)  # warm-up: NCCL's channels and buffers
    reps, spent = 1, burst(1)
    while spent < seconds / 4 and reps < 2**20:
        reps *= 2
        spent = burst(reps)
    reps = max(1, round(reps * seconds / max(spent, 1e-9)))
    found = [burst(reps) / reps for _ in range(int(level["samples"]))]
    if rank == 0:
        factor = 2 * (world - 1) / world
        Path(out).write_text(repr([size * factor / s / GIGA for s in found]), encoding="utf-8")
    dist.destroy_process_group()


def nccl(level: dict[str, float], size: int, backend: str, ranks: int | None) -> dict[str, Any]:
    """The all-reduce over every GPU (``backend`` gloo and ``ranks``: CPU processes, the
    tests' way to run this code without GPUs)."""
    import torch.multiprocessing as mp

    world = ranks or torch.cuda.device_count()
    with tempfile.TemporaryDirectory(prefix="milarun-nccl-") as tmp:
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ["NCCL_DEBUG_FILE"] = f"{tmp}/nccl.%p.log"
        out = f"{tmp}/busbw"
        init = f"file://{tmp}/init"
        mp.spawn(_rank, args=(world, init, level, size, out, backend), nprocs=world)
        samples = [float(v) for v in Path(out).read_text().strip("[]\n").split(",")]
        transports: set[str] = set()
        for log in Path(tmp).glob("nccl.*.log"):
            transports |= set(VIA.findall(log.read_text(errors="replace")))
    return {
        "unit": "GB/s",
        "bytes": size,
        "ranks": world,
        "backend": backend,
        "samples": samples,
        "transports": sorted(transports),
    }


def measure(recorder: Recorder, spec: dict[str, Any], level: dict[str, float]) -> None:
    recorder.data["device"] = {"gpus": torch.cuda.device_count(), "torch": torch.__version__}
    recorder.phase("p2p", lambda: p2p(level, int(spec.get("p2p_bytes", P2P_BYTES))))
    size = int(spec.get("nccl_bytes", NCCL_BYTES))
    backend, ranks = spec.get("backend", "nccl"), spec.get("ranks")
    recorder.phase("nccl", lambda: nccl(level, size, backend, ranks))
