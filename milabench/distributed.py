"""torchrun helpers for data-parallel benchmarks (the gpu-progression "scaling" tests).

A benchmark launched with ``python -m torch.distributed.run --nproc-per-node K -m milarun
run ...`` finds its rank in the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT). Without torchrun every helper degrades to a single process:
rank 0 of a world of 1, and no process group.

Backends: gloo for CPU slices, nccl for GPUs; on GPUs each rank trains on the
``LOCAL_RANK``-th of the devices torchrun's ``CUDA_VISIBLE_DEVICES`` lists, the only one its
CUDA sees (``cuda:0``; milarun.machine.torchdevice.open_own_gpu), as the legacy launcher gave
each rank its own GPU.
"""

from __future__ import annotations

import os
from typing import Any

from milarun.experiment import Experiment


def launched_by_torchrun() -> bool:
    """True when the torchrun environment (at least WORLD_SIZE) is present."""
    return bool(os.environ.get("WORLD_SIZE"))


def env_rank() -> int:
    """This process's global rank as torchrun announces it (0 without torchrun)."""
    return int(os.environ.get("RANK") or 0)


def is_initialized() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def init_from_env(device: Any) -> tuple[int, int]:
    """Join the torchrun process group; returns ``(rank, world_size)``.

    Without torchrun (no WORLD_SIZE in the environment) nothing is initialised and
    ``(0, 1)`` is returned. The backend is gloo when ``device`` is a CPU, else nccl; on a
    GPU the rank's current device becomes ``device`` before the group is created.
    """
    import torch
    import torch.distributed as dist

    if not launched_by_torchrun():
        return 0, 1
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE is set (torchrun) but torch.distributed is unavailable")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    for var in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(var):
            raise RuntimeError(
                f"WORLD_SIZE is set but {var} is not: launch with "
                "`python -m torch.distributed.run` (torchrun)"
            )
    device = torch.device(device)
    if device.type == "cpu":
        dist.init_process_group(backend="gloo", init_method="env://")
    else:
        # exp.device is already the rank's own GPU under torchrun (milarun.machine.torchdevice).
        torch.cuda.set_device(device)
        # device_id binds the NCCL communicator to this rank's GPU (no guessing cuda:0).
        dist.init_process_group(backend="nccl", init_method="env://", device_id=device)
    return dist.get_rank(), dist.get_world_size()


class StopAgreement:
    """Every rank stops after the same step, once every rank's rate log is done.

    A rank's log decides by its own slices and clock, so ranks would disagree by a step and
    the one that went on would hang in DDP's all-reduce. Each step shares this rank's
    verdict over a CPU (gloo) group without waiting, and acts on the previous step's shared
    answer: one step late, identical on every rank, and it never syncs a GPU.
    """

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self._group = dist.new_group(backend="gloo")
        self._pending: Any = None
        self._flag: Any = None

    def __call__(self, log: Any) -> bool:
        import torch

        dist = self._dist
        if self._pending is not None:
            self._pending.wait()
            if int(self._flag.item()):
                return True
        self._flag = torch.tensor([int(log.done)], dtype=torch.int32)
        self._pending = dist.all_reduce(
            self._flag, op=dist.ReduceOp.MIN, group=self._group, async_op=True
        )
        return False


def stop_rule() -> Any:
    """``rule(log) -> bool``: the shared StopAgreement in a process group, else ``log.done``."""
    return StopAgreement() if is_initialized() else (lambda log: log.done)


def _train_log(exp: Experiment, name: str) -> Any:
    for log in exp.rate_logs():
        if log.name == name:
            return log
    raise RuntimeError(f"the experiment has no rate log {name!r} to gather")


def gather_rate_logs(exp: Experiment, name: str = "train") -> list[dict[str, Any]]:
    """Every rank's ``name`` rate-log record as its result dict, in rank order (a
    collective call).

    Under torchrun every rank must call it; rank 0 adds the records of all ranks to its
    result's timings as ``<name>_0``, ``<name>_1``... (Experiment.add_timings), and
    ``exp.write_result`` is True on rank 0 only. Without a process group it returns this
    process's record alone and sets nothing.
    """
    log = _train_log(exp, name)
    if not log.finished:
        log.finish()  # the record must be final before it is shared
    record = log.record()
    if not is_initialized():
        return [record.to_dict()]
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (record, exp.rank_place(rank)))
    exp.write_result = rank == 0
    if rank == 0:
        exp.add_timings({f"{name}_{r}": rec for r, (rec, _) in enumerate(gathered)})
        exp.set_ranks([place for _, place in gathered])
    return [rec.to_dict() for rec, _ in gathered]


def shutdown() -> None:
    """Destroy the process group (no-op without one)."""
    if is_initialized():
        import torch.distributed as dist

        dist.destroy_process_group()
