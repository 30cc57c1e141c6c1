"""calibration: steps of a fixed duration and size, so the true rate is known.

Each step spins on the clock for ``--step-time`` seconds and counts ``--batch-size``
examples: on an idle CPU the true rate is batch_size / step_time examples/s. On a busy one a
step lasts longer (the spin is preempted), so the test also times its own steps with its own
clock readings and checks the harness's steady rate against them, which holds whatever the
load. A harness block holds the spin and part of the harness's own bookkeeping, so the
harness's rate must lie between two rates of the same steps: ``own_rate`` (the spins alone,
an upper bound) and ``own_step_rate`` (each whole ``with`` statement, a lower bound).
``rate_error`` is the harness's difference from ``own_rate``.
"""

from __future__ import annotations

import argparse
import time

from milabench import helpers
from milarun.experiment import Experiment
from milarun.spin import spin


def own_rate(durations: list[float], batch: int, span: tuple[float, float]) -> float | None:
    """examples/s of the steps inside the steady window, from the steps' own durations.

    ``durations`` are the steps after warm-up and ``span`` the window's [start, stop) on
    their cumulative time (the harness's in-block time less its warm-up). A step counts for
    the part of it inside the window, as the harness spreads a block over its slices: a
    step preempted for 100 ms at an edge is then not all in or all out.
    """
    start, stop = span
    elapsed, examples, total = 0.0, 0.0, 0.0
    for duration in durations:
        inside = min(elapsed + duration, stop) - max(elapsed, start)
        elapsed += duration
        if inside > 0 and duration > 0:
            examples += batch * inside / duration
            total += inside
        if elapsed >= stop:
            break
    return examples / total if total > 0 else None


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=64)
    parser.add_argument("--step-time", type=float, default=0.005, help="seconds per step")
    args = exp.parse_args(parser, argv)
    if args.step_time <= 0:
        raise ValueError(f"--step-time must be > 0, got {args.step_time}")
    true_rate = args.batch_size / args.step_time
    exp.metric("true_rate", true_rate)

    log = exp.rate_log("train")
    clock = time.perf_counter
    spins: list[float] = []
    steps: list[float] = []
    while not log.done:
        begin = clock()
        with log.block(args.batch_size):
            spins.append(spin(args.step_time))
        steps.append(clock() - begin)
    log.finish()
    measured = log.steady_rate()
    # The window on the time after warm-up: the warm-up block's bookkeeping (the first
    # clock readings, the monitors' start) is not on the steps' own axis.
    warmup = min(log.blocks, log.warmup_blocks)
    start, stop = log.steady_span()
    span = (start - log.warmup_time, stop - log.warmup_time)
    upper = own_rate(spins[warmup:], args.batch_size, span)
    lower = own_rate(steps[warmup:], args.batch_size, span)
    if measured is not None and upper is not None and lower is not None:
        exp.metric("own_rate", upper)
        exp.metric("own_step_rate", lower)
        exp.metric("rate_error", measured / upper - 1.0)
        exp.metric("nominal_error", measured / true_rate - 1.0)
