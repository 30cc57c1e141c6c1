"""The measurement API a benchmark uses: ``main(experiment, argv)``.

A benchmark opens one timed block per iteration on a :class:`RateLog`; the log turns
in-block time into examples/s per fixed slice (0.5 s) of in-block time. The device is
synchronised only when a block closes a slice and once at the end, so the measurement does
not serialise the device queue on every step.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from milarun.machine import devices
from milarun.machine.slurmenv import node_name
from milarun.measure.diagnostics import DEFAULT_MIN_SLICES, RunLength
from milarun.measure.ratelog import SLICE_DURATION, RateLog
from milarun.results.records import Dataset, RateRecord, TimerRecord

if TYPE_CHECKING:
    from milarun.measure.efficiency import Efficiency


class BadTestArguments(ValueError):
    """The test's own arguments (after ``--``) were rejected by its parser."""


class DoesNotFit(MemoryError):
    """The test's size does not fit the device's memory: the result's failure is ``oom``,
    its message the size and the profile that fits (milabench.modern.fits)."""


class ServerFailed(RuntimeError):
    """The server a test started (an inference engine) misbehaved or never came up: the
    result's failure is ``server``, its message what the server did; ``detail``: what the
    test measured before (kept in the result by the test)."""

    failure_kind = "server"

    def __init__(self, message: str, detail: Any = None):
        super().__init__(message)
        self.detail = detail


class EngineMissing(RuntimeError):
    """The engine a test needs is not installed here: the result's failure is
    ``unavailable``, its message how to install it."""

    failure_kind = "unavailable"


class Timer:
    """A named wall-clock timer; entering it several times adds up."""

    def __init__(self, name: str, clock: Callable[[], float], wallclock: Callable[[], float]):
        self.name, self.clock, self.wallclock = name, clock, wallclock
        self.start: float | None = None
        self.duration, self.entries = 0.0, 0
        self._begin: float | None = None

    def __enter__(self) -> Timer:
        if self.start is None:
            self.start = self.wallclock()
        self._begin = self.clock()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        if self._begin is not None:
            self.duration += self.clock() - self._begin
            self.entries += 1
            self._begin = None

    def record(self) -> TimerRecord:
        return TimerRecord(self.start, self.duration, self.entries)


def parse_with_harness_flags(
    parser: argparse.ArgumentParser, argv: list[str], max_count: int | None = None, seed: int = 1234
) -> argparse.Namespace:
    """``argv`` parsed by ``parser`` with the harness's own flags added (--max-count,
    --seed, --min-slices, --ci-target); any error is BadTestArguments."""
    parser.add_argument(
        "--max-count",
        type=int,
        default=max_count,
        help="minimum work: train at least this many examples",
    )
    parser.add_argument("--seed", type=int, default=seed, help="random seed")
    parser.add_argument(
        "--min-slices",
        type=int,
        default=None,
        help="measure at least this many 0.5 s slices (default "
        f"{DEFAULT_MIN_SLICES}: one full steady window)",
    )
    parser.add_argument(
        "--ci-target",
        type=float,
        default=None,
        metavar="FRACTION",
        help="keep measuring past --max-count until the steady rate's "
        "95%% CI half-width is below this fraction (e.g. 0.01)",
    )

    def error(message: str) -> NoReturn:
        raise BadTestArguments(f"bad test argument: {message}")

    parser.error = error  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    for flag in ("max_count", "min_slices", "ci_target"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            error(f"--{flag.replace('_', '-')} {value} (> 0)")
    return args


def _no_wait() -> None:
    """The CPU's synchronizer: its kernels complete before they return."""


class Experiment:
    """What a benchmark receives: arguments, device, timers, rate logs and metrics.

    The test sets two fields itself: ``synthetic_data`` (whether its data was synthetic)
    and, under torchrun, ``write_result`` (only rank 0 writes the result). Helpers record
    what they measured through :meth:`set_efficiency` and :meth:`add_timings`.
    """

    def __init__(
        self,
        name: str,
        job_id: str = "0",
        outdir: Path | str = ".",
        dataroot: Path | str = ".",
        stamp: str = "",
        clock: Callable[[], float] = time.perf_counter,
        wallclock: Callable[[], float] = time.time,
        device: Any = None,
        on_progress: Callable[[RateLog], None] | None = None,
    ):
        self.name = name
        self.job_id = job_id
        self.outdir = Path(outdir)
        self.dataroot = Path(dataroot)
        self.stamp = stamp
        self.metrics: dict[str, float] = {}
        self.arguments: dict[str, Any] = {}
        self.synthetic_data: bool | None = None
        self.dataset: Dataset | None = None  # see use_dataset
        self.write_result = True
        self.max_count: int | None = None
        self._clock, self._wallclock = clock, wallclock
        self.min_slices: int | None = None  # --min-slices and --ci-target: RunLength
        self.ci_target: float | None = None
        self._device = device
        self._sync: Callable[[], None] | None = None
        self._timers: dict[str, Timer | RateLog] = {}
        self._on_progress = on_progress  # called after a block that closed slices
        self._extra_timings: dict[str, RateRecord] = {}
        self._efficiency: Efficiency | None = None
        self.ranks: list[dict[str, Any]] = []  # a distributed run's, see set_ranks
        self.time("program").__enter__()

    # -- arguments -----------------------------------------------------------------
    def parse_args(
        self,
        parser: argparse.ArgumentParser,
        argv: list[str],
        max_count: int | None = None,
        seed: int = 1234,
    ) -> argparse.Namespace:
        """Parse the test's arguments, adding the harness's ``--max-count`` and ``--seed``."""
        args = parse_with_harness_flags(parser, argv, max_count, seed)
        self.max_count = args.max_count
        self.min_slices, self.ci_target = args.min_slices, args.ci_target
        self.arguments = dict(vars(args))
        return args

    # -- device ----------------------------------------------------------------------
    @property
    def device(self) -> Any:
        """The torch device of this instance (imports torch on first use)."""
        if self._device is None:
            from milarun.machine import torchdevice

            self._device = torchdevice.torch_device()
        return self._device

    def use_device(self, device: Any) -> None:
        """The test trains on ``device`` whatever its slot (cart: the CPU on a GPU slot):
        rate logs made after this sync it, and the slot's GPU is never initialised."""
        self._device, self._sync = device, None

    def sync(self) -> None:
        """Wait for the device's queued work."""
        self._synchronizer()()

    def _synchronizer(self) -> Callable[[], None]:
        if self._sync is None and self._device is None and "torch" not in sys.modules:
            if devices.instance_device_label().startswith(devices.CPU_KIND):
                # A CPU slot whose test has not loaded torch (calibration, the toy tests):
                # nothing can be queued, and importing torch only to learn that cost each
                # such run 2.4 s of CPU. A test that loads torch later runs on the CPU, whose
                # kernels complete before they return.
                self._sync = _no_wait
        if self._sync is None:
            from milarun.machine import torchdevice

            self._sync = torchdevice.synchronizer(self.device)
        return self._sync

    # -- measurement -----------------------------------------------------------------
    def rate_log(
        self,
        name: str = "train",
        max_count: int | None = None,
        slice_duration: float = SLICE_DURATION,
        sync_each_block: bool = False,
    ) -> RateLog:
        """A rate log that is done after ``max_count`` examples (default ``--max-count``)
        and ``--min-slices`` slices (``--ci-target`` too), or at the job's deadline;
        ``sync_each_block``: RateLog's."""
        if name in self._timers:
            raise ValueError(f"timer {name!r} already exists")
        # The sync is resolved now so that importing torch never lands inside a timed block.
        log = RateLog(
            name,
            max_count if max_count is not None else self.max_count,
            slice_duration,
            self._clock,
            self._synchronizer(),
            self._wallclock,
            sync_each_block=sync_each_block,
        )
        log.on_slice = self._on_progress
        log.length_rule = RunLength.from_args(self.min_slices, self.ci_target)
        self._timers[name] = log
        return log

    def time(self, name: str) -> Timer:
        """A named wall-clock timer, used as ``with experiment.time("data"):``."""
        timer = self._timers.get(name)
        if timer is None:
            timer = self._timers[name] = Timer(name, self._clock, self._wallclock)
        if not isinstance(timer, Timer):
            raise ValueError(f"timer {name!r} is a rate log")
        return timer

    def metric(self, name: str, value: Any) -> None:
        """Record the latest value of a metric (a NaN makes the run a failure)."""
        self.metrics[name] = float(value)

    def use_dataset(self, name: str, size: int | None, synthetic: bool) -> None:
        """Record the dataset the test reads: the result's ``dataset`` ({"name", "size"
        (training examples), "synthetic"}) and ``synthetic_data``."""
        self.dataset = Dataset(name, size, synthetic)
        self.synthetic_data = synthetic

    def set_efficiency(self, record: Efficiency) -> None:
        """How well the run used its device (helpers.train: FLOPs of one counted step)."""
        self._efficiency = record

    @property
    def efficiency(self) -> Efficiency | None:
        return self._efficiency

    def add_timings(self, records: Mapping[str, RateRecord]) -> None:
        """Rate records measured by other processes (each DDP rank's ``train_<rank>``),
        added to this result's timings."""
        clashing = sorted(set(records) & set(self._timers))
        if clashing:
            raise ValueError(f"timing {clashing[0]!r} is one of this experiment's own")
        self._extra_timings.update(records)

    def rank_place(self, rank: int) -> dict[str, Any]:
        """Where this process runs as ``rank``: {rank, node, host, device, cuda_devices}
        (how many GPUs its CUDA saw: 1 where it was opened on the rank's own GPU, as the
        legacy launcher gave each rank; None on a CPU)."""
        local = int(os.environ.get("LOCAL_RANK") or 0)
        labels = (os.environ.get("MILARUN_DEVICE") or "").split(",")
        device = labels[local] if local < len(labels) and labels[local] else str(self._device)
        seen = None
        if getattr(self._device, "type", None) == "cuda":
            import torch

            seen = torch.cuda.device_count()
        return {
            "rank": rank,
            "node": node_name(),
            "host": socket.gethostname(),
            "device": device,
            "cuda_devices": seen,
        }

    def set_ranks(self, places: list[dict[str, Any]]) -> None:
        """Every rank's place (rank_place), gathered by rank 0: the result's ``ranks``."""
        self.ranks = list(places)

    @property
    def extra_timings(self) -> dict[str, RateRecord]:
        return dict(self._extra_timings)

    @property
    def side_dir(self) -> Path:
        """A folder of this run's own, beside its result file, created on first use."""
        path = self.outdir / f"{self.name}.J{self.job_id}.{self.stamp}.files"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def finish(self) -> dict[str, RateRecord | TimerRecord]:
        """Close every timer and rate log; returns the ``timings`` records (with those of
        :meth:`add_timings`)."""
        for timer in self._timers.values():
            if isinstance(timer, RateLog):
                if timer.blocks and not timer.finished:
                    try:
                        timer.finish()
                    except Exception:  # a broken device must not lose the record
                        timer.finished = True
            else:
                timer.stop()
        own = {name: timer.record() for name, timer in self._timers.items()}
        return {**own, **self._extra_timings}

    def rate_logs(self) -> list[RateLog]:
        return [t for t in self._timers.values() if isinstance(t, RateLog)]
