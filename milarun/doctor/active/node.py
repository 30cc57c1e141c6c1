"""Inside the probe child (imports torch): the node's GPUs together, on a node with two or more.

Phases:
- ``p2p``: for each pair of GPUs (quick: one way, full: both ways), whether CUDA gives peer
  access and the GB/s of a device-to-device copy between them (a pair without peer access,
  or much slower than the other pairs, is a missing NVLink or a P2P fallback through host
  memory);
- ``nccl``: NCCL all-reduce bus bandwidth over every GPU (one process per GPU, the
  nccl-tests definition: bytes x 2(n-1)/n per second) and the transports NCCL chose, read
  from its own log (``NET/Socket`` between GPUs of one node is a fallback); also the bus
  bandwidth over a sweep of message sizes up to it (``sweep``) and the smallest size where
  it plateaus (within 5% of the best), and the algorithm and protocol NCCL chose where its
  log (NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING) or ``NCCL_ALGO``/``NCCL_PROTO`` say, with
  whether NVLink SHARP (NVLS) was available.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import torch

from milarun.doctor.active.probe_recorder import Recorder, sample_seconds

GIGA = 1e9
P2P_BYTES = 256 * 2**20
NCCL_BYTES = 256 * 2**20
VIA = re.compile(r"\bvia (\S+)")
# "Algo NVLS proto SIMPLE", "algorithm RING protocol LL128": how NCCL's tuning lines name them
CHOSEN = re.compile(
    r"\b(?:algo|algorithm)[ =:]+([A-Za-z_]+)\b.*?\b(?:proto|protocol)[ =:]+([A-Za-z0-9_]+)",
    re.IGNORECASE,
)
NVLS_AVAILABLE = re.compile(r"NVLS multicast support is available|Connected NVLS", re.IGNORECASE)
PLATEAU = 0.95  # of the sweep's best bus bandwidth
SWEEP = {"quick": (64, 8, 1), "full": (256, 64, 16, 4, 1)}  # divisors of the largest size


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
    rank: int,
    world: int,
    init: str,
    level: dict[str, float],
    sizes: list[int],
    out: str,
    backend: str,
) -> None:
    """One rank of the all-reduce. Every rank must run the same number of collectives: the
    repetitions are agreed (the slowest rank's calibration) and the sample count is fixed."""

    import torch.distributed as dist

    gpu = backend == "nccl"
    if gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    device = torch.device(f"cuda:{rank}" if gpu else "cpu")
    found: dict[int, list[float]] = {}
    for size in sizes:
        found[size] = _busbw(torch.ones(size // 4, device=device), level, world, gpu, rank)
    if rank == 0:
        Path(out).write_text(json.dumps(found), encoding="utf-8")
    dist.destroy_process_group()


def _busbw(x: Any, level: dict[str, float], world: int, gpu: bool, rank: int) -> list[float]:
    """The all-reduce's bus bandwidth samples (GB/s) on the tensor ``x``."""
    import time

    import torch.distributed as dist

    device = x.device

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
    factor = 2 * (world - 1) / world
    return [x.numel() * 4 * factor / s / GIGA for s in found]


def sweep_sizes(size: int, level_name: str) -> list[int]:
    """The message sizes of the sweep, the largest ``size`` (each a multiple of 4 bytes)."""
    return sorted({max(2**16, size // d) // 4 * 4 for d in SWEEP.get(level_name, (1,))})


def plateau(sweep: dict[int, list[float]]) -> int | None:
    """The smallest size whose mean bus bandwidth is within PLATEAU of the sweep's best."""
    means = {size: sum(v) / len(v) for size, v in sweep.items() if v}
    if not means:
        return None
    best = max(means.values())
    return min(size for size, mean in means.items() if mean >= PLATEAU * best)


def chosen(log_text: str) -> tuple[set[tuple[str, str]], bool]:
    """(algorithm, protocol) pairs NCCL's log names, and whether NVLS was available."""
    pairs = {(a.upper(), p.upper()) for a, p in CHOSEN.findall(log_text)}
    return pairs, bool(NVLS_AVAILABLE.search(log_text))


def nccl(
    level: dict[str, float], size: int, backend: str, ranks: int | None, level_name: str = ""
) -> dict[str, Any]:
    """The all-reduce over every GPU (``backend`` gloo and ``ranks``: CPU processes, the
    tests' way to run this code without GPUs)."""
    import torch.multiprocessing as mp

    world = ranks or torch.cuda.device_count()
    sizes = sweep_sizes(size, level_name)
    with tempfile.TemporaryDirectory(prefix="milarun-nccl-") as tmp:
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,TUNING")
        os.environ["NCCL_DEBUG_FILE"] = f"{tmp}/nccl.%p.log"
        out = f"{tmp}/busbw"
        init = f"file://{tmp}/init"
        mp.spawn(_rank, args=(world, init, level, sizes, out, backend), nprocs=world)
        sweep = {
            int(k): [float(x) for x in v] for k, v in json.loads(Path(out).read_text()).items()
        }
        transports: set[str] = set()
        pairs: set[tuple[str, str]] = set()
        nvls = False
        for log in Path(tmp).glob("nccl.*.log"):
            text = log.read_text(errors="replace")
            transports |= set(VIA.findall(text))
            found, available = chosen(text)
            pairs, nvls = pairs | found, nvls or available
    forced = os.environ.get("NCCL_ALGO"), os.environ.get("NCCL_PROTO")
    return {
        "unit": "GB/s",
        "bytes": size,
        "ranks": world,
        "backend": backend,
        "samples": sweep[max(sweep)],
        "transports": sorted(transports),
        "sweep": {str(k): sum(v) / len(v) for k, v in sorted(sweep.items())},
        "plateau_bytes": plateau(sweep),
        "algorithms": sorted({a for a, _ in pairs} or ([forced[0].upper()] if forced[0] else [])),
        "protocols": sorted({p for _, p in pairs} or ([forced[1].upper()] if forced[1] else [])),
        "chosen_from": "log" if pairs else ("NCCL_ALGO" if forced[0] else None),
        "nvls_available": nvls,
    }


def measure(recorder: Recorder, spec: dict[str, Any], level: dict[str, float]) -> None:
    recorder.data["device"] = {"gpus": torch.cuda.device_count(), "torch": torch.__version__}
    recorder.phase("p2p", lambda: p2p(level, int(spec.get("p2p_bytes", P2P_BYTES))))
    size = int(spec.get("nccl_bytes", NCCL_BYTES))
    backend, ranks = spec.get("backend", "nccl"), spec.get("ranks")
    name = str(spec.get("level", ""))
    recorder.phase("nccl", lambda: nccl(level, size, backend, ranks, name))
