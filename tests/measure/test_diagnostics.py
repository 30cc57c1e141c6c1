"""Steady-state diagnostics on series with known answers, run length, start-up cost."""

from __future__ import annotations

import json
import math
import random

import pytest

from conftest import milarun
from fakes import FakeClock
from milabench.models import calibration
from milarun.measure.diagnostics import RunLength, ci_halfwidth, log_record, steady_state
from milarun.measure.experiment import RateLog
from milarun.results import steady


def test_flat_series():
    d = steady_state([100.0] * 30)
    assert d.slices == 30 and d.window_slices == 18
    assert d.cv == 0 and d.drift == 0 and d.warmup == 0
    assert d.ci95 == 0 and d.flags == ()
    assert d.to_dict() == {
        "slices": 30,
        "window_slices": 18,
        "cv": 0,
        "drift": 0,
        "warmup": 0,
        "ci95": 0,
        "flags": [],
        "extension": None,
        "throttle": None,
        "contention": None,
    }


def test_ramp_then_flat_has_a_warmup():
    # 9 slices climbing 10, 20 ... 90, then flat at 100: the steady band is +/-2% around
    # 100, first entered by slice index 9, which starts 4.5 s into the run.
    rates = [10.0 * (i + 1) for i in range(9)] + [100.0] * 25
    d = steady_state(rates)
    assert d.warmup == pytest.approx(4.5)
    assert d.drift == 0 and d.flags == ()


def test_linear_drift_is_flagged():
    # A steady window falling 1% per slice: its last third over its first third.
    rates = [100.0 * (1 - 0.01 * i) for i in range(30)]
    window = rates[-20:-2]
    expected = (sum(window[-6:]) / 6) / (sum(window[:6]) / 6) - 1
    d = steady_state(rates)
    assert d.drift == pytest.approx(expected)
    assert d.drift < -0.02 and "drift" in d.flags
    mean = sum(window) / 18
    std = math.sqrt(sum((r - mean) ** 2 for r in window) / 18)
    assert d.cv == pytest.approx(std / mean)


def test_short_series_is_flagged_and_has_no_stats():
    d = steady_state([50.0] * 4)
    assert d.window_slices == 2 and d.cv is None and "few-slices" in d.flags
    assert "few-slices" in steady_state([50.0] * 10).flags  # an 8-slice window: 4 s


def test_ci_halfwidth_by_hand():
    window = [98.0, 102.0, 100.0, 100.0]
    sample_std = math.sqrt((4 + 4) / 3)
    assert ci_halfwidth(window) == pytest.approx(3.182 * sample_std / 2 / 100)


def test_extension_keeps_measuring_until_min_slices():
    clock = FakeClock()
    log = RateLog(max_count=100, clock=clock, wallclock=clock, warmup_blocks=0)
    log.length_rule = RunLength(min_slices=8, deadline=4e9)  # far in the future
    steps = 0
    while not log.done:
        with log.block(10):
            clock.now += 0.25
        steps += 1
    assert log.count > 100  # went on past max_count
    assert len(log.rates) == 8 and log.length_rule.stopped_by == "target"
    # One sync per closed slice (the block crossing max_count also closed one): an
    # extended run does not sync on every block.
    assert log.syncs == 8
    assert log_record(log).extension.to_dict() == {
        "min_slices": 8,
        "ci_target": None,
        "deadline": 4e9,
        "stopped_by": "target",
        "drift_extension": 0,  # its windows too short to judge a drift
    }


def test_extension_stops_at_the_deadline():
    ext = RunLength(ci_target=1e-9, deadline=0.0)  # long past: stop at once
    assert ext.satisfied([1.0, 2.0, 3.0], 0.5) and ext.stopped_by == "deadline"
    noisy = RunLength(ci_target=0.001, deadline=4e9)
    assert not noisy.satisfied([90.0, 110.0] * 12, 0.5)
    assert noisy.satisfied([100.0] * 24, 0.5)


@pytest.mark.slow
def test_results_record_startup_and_diagnostics(tmp_path):
    done = milarun(
        "run",
        "milabench.models.calibration:main",
        "-o",
        tmp_path,
        "--",
        "--step-time",
        "0.01",
        "--batch-size",
        "10",
        "--max-count",
        "100",
        "--min-slices",
        "9",
    )
    assert done.returncode == 0, done.stderr
    (path,) = tmp_path.glob("*.json")
    result = json.loads(path.read_text())
    startup = result["startup"]
    assert 0 < startup["import"] < startup["to_first_slice"]
    # a step lasts at least its 10 ms (more on a busy machine), inside the start-up
    assert startup["setup"] >= 0 and 0.01 <= startup["first_step"] < startup["to_first_slice"]
    diag = result["diagnostics"]["train"]
    assert diag["slices"] >= 9  # --max-count alone gives 1 s: the extension made it 9
    assert diag["extension"]["min_slices"] == 9 and diag["extension"]["stopped_by"]
    assert result["timings"]["train"]["count"] > 100
    bad = milarun(
        "run", "milabench.models.calibration:main", "-o", tmp_path / "b", "--", "--ci-target", "-1"
    )
    assert bad.returncode == 1 and "--ci-target -1" in bad.stdout + bad.stderr


@pytest.mark.parametrize("step", [2e-5, 1e-3, 0.3, 1.0, 3.0])
def test_a_run_ends_by_slices_whatever_one_step_takes(step):
    """No --max-count: the run stops once it has 12 slices (a window of 10), as soon as it
    may, whether a step takes 20 us or 3 s."""
    clock = FakeClock()
    log = RateLog(clock=clock, wallclock=clock, warmup_blocks=0)
    log.length_rule = RunLength(min_slices=12, deadline=4e9)
    while not log.done:
        with log.block(10):
            clock.now += step
    log.finish()
    assert len(steady.window(log.rates)) >= 8
    assert steady.rate(log.rates) == pytest.approx(10 / step)
    assert 6.0 - 1e-9 <= log.in_block < 6.0 + step  # not one step more than it needed
    assert log.length_rule.stopped_by == "target"


@pytest.mark.parametrize("warmup_blocks", [0, 1])
def test_the_steps_own_timing_agrees_with_the_harness_on_a_busy_machine(warmup_blocks):
    """calibration's independent check: steps preempted at random (a busy CPU) move the
    rate far from the nominal one, and the harness's slices still match the steps' own
    durations over the steady window, a long warm-up step (CUDA init) before them or not."""
    clock = FakeClock()
    log = RateLog(clock=clock, wallclock=clock, warmup_blocks=warmup_blocks)
    log.length_rule = RunLength(min_slices=30, deadline=4e9)
    rng = random.Random(0)
    durations = []
    while not log.done:
        step = 0.005 + (rng.uniform(0.0, 0.05) if rng.random() < 0.1 else 0.0)
        step += 1.3 if not durations else 0.0
        with log.block(64):
            clock.now += step
        durations.append(step)
    log.finish()
    harness = steady.rate(log.rates)
    start, stop = log.steady_span()
    span = (start - log.warmup_time, stop - log.warmup_time)
    own = calibration.own_rate(durations[warmup_blocks:], 64, span)
    assert harness == pytest.approx(own, rel=1e-9)  # a step counts for its part inside
    assert harness < 0.8 * 64 / 0.005  # the load shows against the nominal rate
