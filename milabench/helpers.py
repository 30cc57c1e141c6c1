"""What every benchmark shares: seeding, the device, and the timed training loop."""

from __future__ import annotations

import random
from typing import Any, Callable

from milarun.experiment import Experiment


def seed_everything(seed: int) -> None:
    import numpy
    import torch

    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def setup(exp: Experiment, args: Any) -> Any:
    """Seed the generators and return the instance's torch device."""
    seed_everything(args.seed)
    return exp.device


def train(exp: Experiment, step: Callable[[], Any], batch_size: int,
          metric: str = "loss") -> Any:
    """Run ``step()`` (one iteration of ``batch_size`` examples) until ``--max-count``.

    Each call is one timed block of the ``train`` rate log; the value of the last step is
    recorded as ``metric`` once the loop ends (reading it earlier would sync the device).
    """
    log = exp.rate_log("train")
    if log.max_count is None:
        raise ValueError("this test needs --max-count (the number of examples to train on)")
    value = None
    with exp.time("train_loop"):
        while not log.done:
            with log.block(batch_size):
                value = step()
    log.finish()
    if value is not None:
        exp.metric(metric, value.item() if hasattr(value, "item") else value)
    return value
