"""calibration: steps of a fixed duration and size, so the true rate is known.

Each step spins on the clock for ``--step-time`` seconds and counts ``--batch-size``
examples: on an idle CPU the true rate is batch_size / step_time examples/s. On a busy one a
step lasts longer (the spin is preempted), so the test also times its own steps, with its own
clock readings, and checks the harness's steady rate against the rate of the same steps
(``own_rate``; ``rate_error`` is the difference), which holds whatever the load.
"""

from __future__ import annotations

import argparse

from milabench import helpers
from milarun.experiment import Experiment
from milarun.spin import spin


def own_rate(durations: list[float], batch: int, span: tuple[float, float]) -> float | None:
    """examples/s of the steps inside the steady window, from the steps' own durations.

    ``span`` is the window's in-block time [start, stop) (``RateLog.steady_span()``); a
    step belongs to it when its midpoint, on the cumulative time of the steps, falls inside.
    """
    start, stop = span
    elapsed, steps, total = 0.0, 0, 0.0
    for duration in durations:
        middle = elapsed + duration / 2
        elapsed += duration
        if start <= middle < stop:
            steps += 1
            total += duration
    return batch * steps / total if steps and total > 0 else None


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
    durations: list[float] = []
    while not log.done:
        with log.block(args.batch_size):
            durations.append(spin(args.step_time))
    log.finish()
    measured = log.steady_rate()
    independent = own_rate(durations, args.batch_size, log.steady_span())
    if measured is not None and independent is not None:  # too short: the harness says so
        exp.metric("own_rate", independent)
        exp.metric("rate_error", measured / independent - 1.0)
        exp.metric("nominal_error", measured / true_rate - 1.0)
