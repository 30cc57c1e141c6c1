"""RateLog: examples/s per fixed slice of in-block time, the device synced once a slice."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from milarun.results import steady
from milarun.results.records import RateRecord

SLICE_DURATION = 0.5
_EPS = 1e-12


class _Block:
    """One timed block of a :class:`RateLog`.

    A plain class rather than ``@contextmanager``: the generator machinery cost ~1 us per
    block, the whole of the harness's per-step cost at short steps (milarun selftest).
    """

    __slots__ = ("log", "count", "start")

    def __init__(self, log: RateLog, count: int):
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

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
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
        sync_each_block: bool = False,
    ):
        self.name = name
        # Sync after every block, not once a slice: for blocks long enough that a sync
        # costs nothing, and whose device work the CPU can queue far ahead (a GEMM loop
        # queues a whole slice in a few ms), so that each slice holds its own work.
        self.sync_each_block = sync_each_block
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
        # monitor's samples (milarun.measure.energy: energy and throttling over the window).
        self.slice_ends: list[float] = []
        self.finished = False
        self._slice_time = 0.0
        self._slice_count = 0.0
        self._unsynced = False
        # Called after a block that closed slices, outside the timed region.
        self.on_slice: Callable[[RateLog], None] | None = None
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

    def block(self, count: int) -> _Block:
        """Time one iteration that processes ``count`` examples: ``with log.block(n):``."""
        return _Block(self, count)

    def _close_block(self, start: float, count: int) -> None:
        """Account for a block that started at ``start`` and ended without an exception."""
        end = self.clock()
        warmup = self.blocks < self.warmup_blocks
        closes_slice = self._slice_time + (end - start) >= self.slice_duration - _EPS
        # Only the block that crosses max_count syncs (an extended run goes on past it).
        reaches_max = (
            self.max_count is not None and self.count < self.max_count <= self.count + count
        )
        # A warm-up block syncs so its queued work does not spill into the first slice.
        if warmup or closes_slice or reaches_max or self.sync_each_block:
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
            assert self.last_end is not None  # time in a slice: a block has closed
            self.rates.append(self._slice_count / self._slice_time)
            self.slice_ends.append(self.wallclock() - (self.clock() - self.last_end))
            self.last_slice = self._slice_time
            self._slice_time = 0.0
            self._slice_count = 0.0
        if self.on_slice is not None:  # the window is over: say so, whatever comes after
            self.on_slice(self)

    def record(self) -> RateRecord:
        duration = (
            self.last_end - self.first_start
            if self.first_start is not None and self.last_end is not None
            else 0.0
        )
        return RateRecord(
            self.wall_start,
            duration,
            self.in_block,
            self.count,
            self.max_count,
            self.blocks,
            self.syncs,
            self.slice_duration,
            self.last_slice,
            tuple(self.rates),
            min(self.blocks, self.warmup_blocks),
            self.warmup_time,
            tuple(self.slice_ends),
        )

    def steady_rate(self) -> float | None:
        """The run's rate: the mean of the steady window (None when too short)."""
        return steady.rate(self.rates, self.slice_duration)

    def steady_span(self) -> tuple[float, float]:
        """The in-block time [start, stop) that the steady window covers, so a test can time
        the same steps itself (warm-up blocks included); empty (start == stop) when there is
        no window."""
        start, stop = steady.span(len(self.rates), self.slice_duration)
        return self.warmup_time + start, self.warmup_time + stop
