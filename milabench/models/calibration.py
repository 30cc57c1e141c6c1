"""calibration: steps of a fixed duration and size, so the true rate is known.

Each step spins on the clock for exactly ``--step-time`` seconds and counts
``--batch-size`` examples: the true rate is batch_size / step_time examples/s, and the
harness's measured steady rate can be checked against it.
"""

from __future__ import annotations

import argparse
import time

from milarun.experiment import Experiment
from milarun.results import steady_rate


def spin(duration: float, clock=time.perf_counter) -> None:
    """Busy-wait for ``duration`` seconds (sleep would add scheduler jitter)."""
    deadline = clock() + duration
    while clock() < deadline:
        pass


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--step-time", type=float, default=0.005, help="seconds per step")
    args = exp.parse_args(parser, argv, max_count=76_800)
    if args.step_time <= 0:
        raise ValueError(f"--step-time must be > 0, got {args.step_time}")
    true_rate = args.batch_size / args.step_time
    exp.metric("true_rate", true_rate)

    log = exp.rate_log("train")
    while not log.done:
        with log.block(args.batch_size):
            spin(args.step_time)
    log.finish()
    measured = steady_rate(log.rates, log.slice_duration)
    if measured is not None:  # too short a run is reported by the harness as such
        exp.metric("rate_error", measured / true_rate - 1.0)
