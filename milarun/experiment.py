"""The measurement API a benchmark uses: ``main(experiment, argv)``.

A benchmark opens one timed block per iteration on a :class:`RateLog`; the log turns
in-block time into examples/s per fixed slice (0.5 s) of in-block time. The device is
synchronised only when a block closes a slice and once at the end, so the measurement does
not serialise the device queue on every step.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from milarun import results
from milarun.results import RateRecord, TimerRecord
from milarun.diagnostics import DEFAULT_MIN_SLICES, RunLength

if TYPE_CHECKING:
    from milarun.efficiency import Efficiency

SLICE_DURATION = 0.5
_EPS = 1e-12


class BadTestArguments(ValueError):
    """The test's own arguments (after ``--``) were rejected by its parser."""


class _Block:
    """One timed block of a :class:`RateLog`.

    A plain class rather than ``@contextmanager``: the generator machinery cost ~1 us per
    block, the whole of the harness's per-step cost at short steps (milarun selftest).
    """

    __slots__ = ("log", "count", "start")

    def __init__(self, log: "RateLog", count: int):
        self.log = log
        self.count = count

    def __enter__(self) -> None:
        log = self.log
        if log.finished:
            raise RuntimeError(f"rate log {log.name!r} is already finished")
        start = log.clock()
        if log.first_start is None:
            log.first_start = start
            log.wall_start = log.wallclock()
        self.start = start

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is None:  # an iteration that raised is not logged
            self.log._close_block(self.start, self.count)
        return False


class RateLog:
    """Examples/s per ``slice_duration`` seconds of in-block time.

    A block that crosses a slice boundary is split over the slices it covers in proportion
    to time, so every closed slice holds exactly ``slice_duration`` seconds of work. The
    unfinished last slice is kept as a partial slice when the log is finished.

    The first ``warmup_blocks`` blocks are counted (examples, in-block time) but not sliced:
    a first step holds lazy CUDA init, cudnn autotuning and allocator growth (12 s for
    resnet101 on an H100, 33 s for SSD), which as slices would fill the steady window.
    """

    def __init__(
        self,
        name: str = "train",
        max_count: int | None = None,
        slice_duration: float = SLICE_DURATION,
        clock: Callable[[], float] = time.perf_counter,
        sync: Callable[[], None] = lambda: None,
        wallclock: Callable[[], float] = time.time,
        warmup_blocks: int = 1,
    ):
        self.name = name
        self.warmup_blocks = warmup_blocks
        self.warmup_time = 0.0  # in-block time of the warm-up blocks
        self.max_count = max_count
        self.slice_duration = slice_duration
        self.clock = clock
        self.sync = sync
        self.wallclock = wallclock
        self.rates: list[float] = []
        self.count = 0
        self.blocks = 0
        self.in_block = 0.0
        self.syncs = 0
        self.first_start: float | None = None
        self.last_end: float | None = None
        self.wall_start: float | None = None
        self.last_slice: float | None = None
        # Wall clock at which each slice closed: maps the steady window onto the GPU
        # monitor's samples (milarun.energy: energy and throttling over the window).
        self.slice_ends: list[float] = []
        self.finished = False
        self._slice_time = 0.0
        self._slice_count = 0.0
        self._unsynced = False
        # Called after a block that closed slices, outside the timed region.
        self.on_slice: Callable[["RateLog"], None] | None = None
        # Start-up cost: the first block's duration and when the first slice closed.
        self.first_block: float | None = None
        self.first_slice_at: float | None = None
        # When the run has measured enough once max_count is reached (diagnostics.RunLength:
        # --min-slices/--ci-target). None: max_count alone decides.
        self.length_rule: Any = None
        self._judged_at = -1  # slices when the rule last said "not yet"

    @property
    def done(self) -> bool:
        """True once ``max_count`` examples (if set) were logged and the length rule, if
        any, is satisfied; or once the log is finished. Without either, never."""
        if self.finished:
            return True
        if self.max_count is not None and self.count < self.max_count:
            return False
        rule = self.length_rule
        if rule is None:
            return self.max_count is not None
        # The rule can only change its mind when a slice closes: asking it once per slice
        # keeps this check to a few attribute reads per step.
        if len(self.rates) == self._judged_at:
            return False
        if rule.satisfied(self.rates, self.slice_duration):
            return True
        self._judged_at = len(self.rates)
        return False

    def block(self, count: int) -> "_Block":
        """Time one iteration that processes ``count`` examples: ``with log.block(n):``."""
        return _Block(self, count)

    def _close_block(self, start: float, count: int) -> None:
        """Account for a block that started at ``start`` and ended without an exception."""
        end = self.clock()
        warmup = self.blocks < self.warmup_blocks
        closes_slice = self._slice_time + (end - start) >= self.slice_duration - _EPS
        # Only the block that crosses max_count syncs (an extended run goes on past it).
        reaches_max = (self.max_count is not None
                       and self.count < self.max_count <= self.count + count)
        # A warm-up block syncs so its queued work does not spill into the first slice.
        if warmup or closes_slice or reaches_max:
            # Wait for the queued device work so the closed slice holds its true time.
            self.sync()
            self.syncs += 1
            end = self.clock()
            self._unsynced = False
        else:
            self._unsynced = True
        closed = len(self.rates)
        if warmup:
            self.blocks += 1
            self.count += count
            self.in_block += end - start
            self.warmup_time += end - start
        else:
            self._add(end - start, count)
            if len(self.rates) > closed:
                self._stamp_slices(len(self.rates) - closed)
        self.last_end = end
        if self.first_block is None:
            self.first_block = end - start
        if closed == 0 and self.rates:
            self.first_slice_at = self.wallclock()
        if self.on_slice is not None and len(self.rates) > closed:
            self.on_slice(self)

    def _add(self, elapsed: float, count: int) -> None:
        self.blocks += 1
        self.count += count
        self.in_block += elapsed
        if elapsed <= 0:
            self._slice_count += count
            return
        remaining = elapsed
        while self._slice_time + remaining >= self.slice_duration - _EPS:
            take = self.slice_duration - self._slice_time
            self._slice_count += count * take / elapsed
            self.rates.append(self._slice_count / self.slice_duration)
            remaining -= take
            self._slice_time = 0.0
            self._slice_count = 0.0
        if remaining > _EPS:
            self._slice_time += remaining
            self._slice_count += count * remaining / elapsed

    def _stamp_slices(self, new: int) -> None:
        """Wall-clock ends of the ``new`` slices the block that just ended closed: its last
        ``_slice_time`` seconds are in the open slice, and a block runs without a gap, so
        the slices before the last one closed a slice duration apart."""
        last = self.wallclock() - self._slice_time
        width = self.slice_duration
        self.slice_ends.extend(last - (new - 1 - i) * width for i in range(new))

    def finish(self) -> None:
        """Synchronise once more and close the partial last slice."""
        if self.finished:
            return
        self.finished = True
        if self._unsynced:
            before = self.clock()
            self.sync()
            self.syncs += 1
            waited = self.clock() - before
            # The wait belongs to the work of the blocks still in the open slice.
            self._slice_time += waited
            self.in_block += waited
            self.last_end = (self.last_end or before) + waited
            self._unsynced = False
        if self._slice_time > _EPS:
            self.rates.append(self._slice_count / self._slice_time)
            self.slice_ends.append(self.wallclock() - (self.clock() - self.last_end))
            self.last_slice = self._slice_time
            self._slice_time = 0.0
            self._slice_count = 0.0

    def record(self) -> RateRecord:
        duration = (self.last_end - self.first_start
                    if self.first_start is not None and self.last_end is not None else 0.0)
        return RateRecord(self.wall_start, duration, self.in_block, self.count,
                          self.max_count, self.blocks, self.syncs, self.slice_duration,
                          self.last_slice, tuple(self.rates),
                          min(self.blocks, self.warmup_blocks), self.warmup_time,
                          tuple(self.slice_ends))

    def steady_rate(self) -> float | None:
        """The run's rate: the mean of the steady window (None when too short)."""
        return results.steady_rate(self.rates, self.slice_duration)

    def steady_span(self) -> tuple[float, float]:
        """The in-block time [start, stop) that the steady window covers, so a test can time
        the same steps itself (warm-up blocks included); empty (start == stop) when there is
        no window."""
        n, width = len(self.rates), self.slice_duration
        start = max(0, n - round(results.STEADY_FROM_END / width)) * width
        stop = (n - round(results.STEADY_TO_END / width)) * width
        return self.warmup_time + start, self.warmup_time + max(start, stop)


class Timer:
    """A named wall-clock timer; entering it several times adds up."""

    def __init__(self, name: str, clock: Callable[[], float], wallclock: Callable[[], float]):
        self.name, self.clock, self.wallclock = name, clock, wallclock
        self.start: float | None = None
        self.duration, self.entries = 0.0, 0
        self._begin: float | None = None

    def __enter__(self) -> "Timer":
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
        self.dataset: dict[str, Any] | None = None  # see use_dataset
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
        self.time("program").__enter__()

    # -- arguments -----------------------------------------------------------------
    def parse_args(self, parser: argparse.ArgumentParser, argv: list[str],
                   max_count: int | None = None, seed: int = 1234) -> argparse.Namespace:
        """Parse the test's arguments, adding the harness's ``--max-count`` and ``--seed``."""
        parser.add_argument("--max-count", type=int, default=max_count,
                            help="minimum work: train at least this many examples")
        parser.add_argument("--seed", type=int, default=seed, help="random seed")
        parser.add_argument("--min-slices", type=int, default=None,
                            help="measure at least this many 0.5 s slices (default "
                                 f"{DEFAULT_MIN_SLICES}: one full steady window)")
        parser.add_argument("--ci-target", type=float, default=None, metavar="FRACTION",
                            help="keep measuring past --max-count until the steady rate's "
                                 "95%% CI half-width is below this fraction (e.g. 0.01)")

        def error(message: str) -> None:
            raise BadTestArguments(f"bad test argument: {message}")

        parser.error = error  # type: ignore[method-assign]
        args = parser.parse_args(argv)
        for flag in ("max_count", "min_slices", "ci_target"):
            value = getattr(args, flag)
            if value is not None and value <= 0:
                error(f"--{flag.replace('_', '-')} {value} (> 0)")
        self.max_count = args.max_count
        self.min_slices, self.ci_target = args.min_slices, args.ci_target
        self.arguments = dict(vars(args))
        return args

    # -- device ----------------------------------------------------------------------
    @property
    def device(self) -> Any:
        """The torch device of this instance (imports torch on first use)."""
        if self._device is None:
            from milarun import devices

            self._device = devices.torch_device()
        return self._device

    def use_device(self, device: Any) -> None:
        """The test trains on ``device`` whatever its slot (cart: the CPU on a GPU slot):
        rate logs made after this sync it, and the slot's GPU is never initialised."""
        self._device, self._sync = device, None

    def sync(self) -> None:
        """Wait for the device's queued work."""
        self._synchronizer()()

    def _synchronizer(self) -> Callable[[], None]:
        if self._sync is None:
            from milarun import devices

            self._sync = devices.synchronizer(self.device)
        return self._sync

    # -- measurement -----------------------------------------------------------------
    def rate_log(self, name: str = "train", max_count: int | None = None,
                 slice_duration: float = SLICE_DURATION) -> RateLog:
        """A rate log that is done after ``max_count`` examples (default ``--max-count``)
        and ``--min-slices`` slices (``--ci-target`` too), or at the job's deadline."""
        if name in self._timers:
            raise ValueError(f"timer {name!r} already exists")
        # The sync is resolved now so that importing torch never lands inside a timed block.
        log = RateLog(name, max_count if max_count is not None else self.max_count,
                      slice_duration, self._clock, self._synchronizer(), self._wallclock)
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
        self.dataset = {"name": name, "size": size, "synthetic": synthetic}
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
