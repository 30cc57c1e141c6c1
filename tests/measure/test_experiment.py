"""The measurement API driven by a fake clock: exact slice values."""

from __future__ import annotations

import argparse

import pytest

from fakes import FakeClock
from milarun.measure.experiment import BadTestArguments, Experiment, RateLog
from milarun.results import steady


class SyncRecorder:
    """A device sync that takes ``cost`` seconds of the fake clock and is counted."""

    def __init__(self, clock: FakeClock, cost: float = 0.0) -> None:
        self.clock = clock
        self.cost = cost
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        self.clock.advance(self.cost)


def make_log(
    clock: FakeClock, sync=None, max_count=None, slice_duration=0.5, warmup_blocks=0
) -> RateLog:
    # Exact-slice tests slice every block; the warm-up tests below ask for one.
    return RateLog(
        "train",
        max_count=max_count,
        slice_duration=slice_duration,
        clock=clock,
        sync=sync or (lambda: None),
        wallclock=lambda: 1000.0,
        warmup_blocks=warmup_blocks,
    )


def run_blocks(
    log: RateLog, clock: FakeClock, blocks: list[tuple[float, int]], gap: float = 0.0
) -> None:
    for duration, count in blocks:
        with log.block(count):
            clock.advance(duration)
        clock.advance(gap)


def test_slices_of_equal_blocks():
    clock = FakeClock()
    log = make_log(clock)
    run_blocks(log, clock, [(0.125, 10)] * 8)  # 1 s of work, 80 examples
    log.finish()
    assert log.rates == [80.0, 80.0]
    assert log.count == 80
    assert log.last_slice is None  # nothing left over


def test_block_longer_than_a_slice_spreads_evenly():
    clock = FakeClock()
    log = make_log(clock)
    run_blocks(log, clock, [(0.25, 100)])  # 400/s for a quarter slice
    run_blocks(log, clock, [(1.5, 300)])  # 200/s over 1.5 s
    log.finish()
    # slice 1: 0.25 s at 400/s + 0.25 s at 200/s = 150 examples -> 300/s
    # slices 2 and 3: 0.5 s at 200/s -> 200/s; partial 4th slice: 0.25 s at 200/s
    assert log.rates == [300.0, 200.0, 200.0, 200.0]
    assert log.last_slice == 0.25
    assert sum(r * 0.5 for r in log.rates[:-1]) + log.rates[-1] * 0.25 == 400


def test_partial_last_slice_rate_uses_its_own_duration():
    clock = FakeClock()
    log = make_log(clock)
    run_blocks(log, clock, [(0.125, 5)] * 5)  # 0.625 s: one slice + 0.125 s
    log.finish()
    assert log.rates == [40.0, 40.0]
    assert log.last_slice == 0.125


def test_sync_only_when_a_block_closes_a_slice_and_once_at_the_end():
    clock = FakeClock()
    sync = SyncRecorder(clock)
    log = make_log(clock, sync)
    run_blocks(log, clock, [(0.125, 1)] * 9)  # slices close after blocks 4 and 8
    assert sync.calls == 2
    log.finish()
    assert sync.calls == 3  # the final sync for the unsynced ninth block
    log.finish()
    assert sync.calls == 3


class QueueingDevice:
    """A GPU the CPU queues work on: each block takes ``cpu`` seconds to enqueue and
    ``work`` seconds on the device, which runs the queue in order; the queue holds
    ``depth`` seconds of work (a full one blocks the CPU); a sync waits for it."""

    def __init__(self, clock: FakeClock, cpu: float, work: float, depth: float) -> None:
        self.clock, self.cpu, self.work, self.depth = clock, cpu, work, depth
        self.busy_until = 0.0

    def enqueue(self) -> None:
        self.clock.advance(max(0.0, self.busy_until - self.depth - self.clock()))
        self.busy_until = max(self.busy_until, self.clock()) + self.work
        self.clock.advance(self.cpu)

    def sync(self) -> None:
        self.clock.advance(max(0.0, self.busy_until - self.clock()))


@pytest.mark.parametrize("each_block", [False, True])
def test_sync_each_block_keeps_queued_work_in_its_own_slice(each_block):
    clock = FakeClock()
    device = QueueingDevice(clock, cpu=0.001, work=0.05, depth=0.7)  # 20 blocks/s of 10 examples
    log = RateLog(
        "train",
        clock=clock,
        sync=device.sync,
        wallclock=lambda: 1000.0,
        warmup_blocks=0,
        sync_each_block=each_block,
    )
    for _ in range(200):
        with log.block(10):
            device.enqueue()
    log.finish()
    assert log.count / log.in_block == pytest.approx(200.0, rel=1e-6)  # the mean holds
    spread = max(log.rates[:-1]) / min(log.rates[:-1])
    if each_block:
        assert log.syncs == 200
        assert spread == pytest.approx(1.0, abs=0.03)
    else:  # one sync a slice: slices swing with where the drain fell
        assert spread > 2


def test_sync_time_counts_inside_the_block_that_closes_the_slice():
    clock = FakeClock()
    sync = SyncRecorder(clock, cost=0.25)  # queued device work the CPU did not wait for
    log = make_log(clock, sync)
    run_blocks(log, clock, [(0.25, 50), (0.25, 50)])
    # second block closes the slice: its true time is 0.25 + 0.25 s of waiting
    log.finish()
    assert sync.calls == 1
    assert log.in_block == pytest.approx(0.75)
    # 0.5 s slice: block 1 (50 ex in 0.25 s) + half of block 2 (25 ex) = 75 -> 150/s
    assert log.rates == [150.0, 100.0]
    assert log.last_slice == pytest.approx(0.25)


def test_final_sync_time_goes_to_the_partial_slice():
    clock = FakeClock()
    sync = SyncRecorder(clock, cost=0.125)
    log = make_log(clock, sync)
    run_blocks(log, clock, [(0.125, 10)])
    log.finish()
    assert sync.calls == 1
    assert log.rates == [40.0]  # 10 examples in 0.25 s
    assert log.last_slice == 0.25


def test_max_count_stops_the_loop_and_syncs():
    clock = FakeClock()
    sync = SyncRecorder(clock)
    log = make_log(clock, sync, max_count=30)
    blocks = 0
    while not log.done:
        with log.block(10):
            clock.advance(0.0625)
        blocks += 1
    assert blocks == 3 and log.count == 30
    assert sync.calls == 1  # reached max-count: the last block waits for the device
    log.finish()
    assert sync.calls == 1


def test_overhead_is_time_outside_blocks():
    clock = FakeClock()
    log = make_log(clock)
    run_blocks(log, clock, [(0.25, 1)] * 4, gap=0.125)
    log.finish()
    record = log.record()
    # blocks span 4 * 0.25 + 3 gaps of 0.125 (the gap after the last block is not counted)
    assert (record.in_block, record.duration, record.overhead) == (1.0, 1.375, 0.375)
    assert record.blocks == 4 and record.count == 4
    assert record.rates == (4.0, 4.0)
    # the one serialisation: the legacy keys of a timings entry, in order
    expected = {
        "type": "rate",
        "start": 1000.0,
        "duration": 1.375,
        "in_block": 1.0,
        "overhead": 0.375,
        "count": 4,
        "max_count": None,
        "blocks": 4,
        "syncs": 2,
        "slice": 0.5,
        "last_slice": None,
        "rates": [4.0, 4.0],
        "warmup_blocks": 0,
        "warmup_time": 0.0,
        "slice_ends": [1000.0, 1000.0],
    }  # when each slice closed: a still wall clock
    assert list(record.to_dict().items()) == list(expected.items())


def test_exception_inside_a_block_logs_nothing():
    clock = FakeClock()
    log = make_log(clock)
    with pytest.raises(RuntimeError):
        with log.block(10):
            clock.advance(0.25)
            raise RuntimeError("boom")
    assert log.count == 0 and log.blocks == 0


def test_block_after_finish_is_refused():
    clock = FakeClock()
    log = make_log(clock)
    log.finish()
    with pytest.raises(RuntimeError):
        with log.block(1):
            pass


def test_experiment_timers_metrics_and_side_dir(tmp_path):
    clock = FakeClock()
    exp = Experiment(
        "t",
        job_id="1.2",
        outdir=tmp_path,
        stamp="S",
        clock=clock,
        wallclock=lambda: 5.0,
        device="cpu",
    )
    with exp.time("data"):
        clock.advance(0.5)
    with exp.time("data"):
        clock.advance(0.25)
    log = exp.rate_log("train", max_count=4)
    for _ in range(2):  # a warm-up block, then one slice
        with log.block(2):
            clock.advance(0.5)
    exp.metric("loss", 0.5)
    exp.metric("loss", 0.25)  # last value wins
    timings = exp.finish()
    assert timings["data"].duration == 0.75 and timings["data"].entries == 2
    assert timings["data"].to_dict() == {
        "type": "timer",
        "start": 5.0,
        "duration": 0.75,
        "entries": 2,
    }
    assert timings["program"].duration == 1.75
    assert timings["train"].rates == (4.0,) and timings["train"].warmup_blocks == 1
    assert exp.metrics == {"loss": 0.25}
    side = exp.side_dir
    assert side.is_dir() and side.name == "t.J1.2.S.files"


def test_parse_args_adds_harness_options():
    exp = Experiment("t", device="cpu")
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    args = exp.parse_args(parser, ["--batch-size", "4", "--max-count", "100"], max_count=7)
    assert (args.batch_size, args.max_count, args.seed) == (4, 100, 1234)
    assert exp.max_count == 100
    assert exp.arguments["batch_size"] == 4
    assert exp.rate_log().max_count == 100
    with pytest.raises(BadTestArguments, match="--nope"):
        Experiment("t", device="cpu").parse_args(argparse.ArgumentParser(), ["--nope"])


def test_timings_measured_elsewhere_join_the_experiments_own():
    clock = FakeClock()
    exp = Experiment("t", clock=clock, wallclock=lambda: 5.0, device="cpu")
    log = exp.rate_log("train")
    with log.block(2):
        clock.advance(0.5)
    other = log.record()
    exp.add_timings({"train_1": other})
    with pytest.raises(ValueError, match="'train'"):
        exp.add_timings({"train": other})
    timings = exp.finish()
    assert set(timings) == {"program", "train", "train_1"} and timings["train_1"] == other
    assert exp.extra_timings == {"train_1": other}


@pytest.mark.parametrize(
    "slices, span",
    [
        (30, (5.0, 14.0)),  # rates[10:28]: 9 s ending 1 s before the end
        (22, (1.0, 10.0)),
        (10, (0.0, 4.0)),  # shorter than the full window: from the start
        (1, (0.0, 0.0)),  # no window at all
    ],
)
def test_steady_span_is_the_time_of_the_steady_window(slices, span):
    clock = FakeClock()
    log = make_log(clock)
    run_blocks(log, clock, [(0.5, 10)] * slices)
    log.finish()
    assert log.steady_span() == span
    start, stop = log.steady_span()
    window = log.rates[round(start / 0.5) : round(stop / 0.5)]
    assert window == steady.window(log.rates)
    assert log.steady_rate() == (20.0 if slices >= 5 else None)


def test_a_long_first_step_is_warm_up_not_slices():
    # An H100 resnet101: a 12 s first step (cudnn autotuning), then 0.05 s steps of 64.
    # Sliced, the first step alone filled 24 slices at 5 ex/s and ended the run.
    clock = FakeClock()
    sync = SyncRecorder(clock)
    log = make_log(clock, sync, warmup_blocks=1)
    run_blocks(log, clock, [(12.0, 64)] + [(0.05, 64)] * 40)  # 2 s after the warm-up
    log.finish()
    assert log.rates == pytest.approx([1280.0] * 4)
    assert log.count == 41 * 64 and log.blocks == 41
    assert log.in_block == pytest.approx(14.0) and log.warmup_time == pytest.approx(12.0)
    record = log.record()
    assert (record.warmup_blocks, record.warmup_time) == (1, pytest.approx(12.0))
    assert sync.calls >= 1 + 4  # the warm-up block syncs, then each closed slice


def test_the_warm_up_block_syncs_so_its_queued_work_stays_out_of_the_slices():
    clock = FakeClock()
    sync = SyncRecorder(clock, cost=0.5)  # the first step queued 0.5 s of device work
    log = make_log(clock, sync, warmup_blocks=1)
    run_blocks(log, clock, [(0.01, 10)])
    assert log.warmup_time == pytest.approx(0.51) and log.rates == []


def test_steady_span_starts_after_the_warm_up():
    clock = FakeClock()
    log = make_log(clock, warmup_blocks=1)
    run_blocks(log, clock, [(3.0, 1)] + [(0.5, 1)] * 24)
    log.finish()
    assert log.steady_span() == (3.0 + 2.0, 3.0 + 11.0)  # slices 4..21 of 24, after 3 s
