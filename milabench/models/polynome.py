"""toy_reg: fit a degree-4 polynomial with one Linear layer on x..x^4 features.

Legacy counterpart: ``milarun/models/polynome.py`` at mila-ao-2020-2. As there, each step
draws its batch on the CPU (inputs, features and targets), copies it to the device, reads
the loss on the host (``loss.item()``, a device sync that is part of the measured
workload), zeroes the gradients in place and updates the two parameters by hand (plain
SGD, lr 0.01). One example is one (x, y) sample.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from milabench import helpers
from milarun.experiment import Experiment

DEGREE = 4


def features(x: torch.Tensor) -> torch.Tensor:
    """[x, x^2, x^3, x^4] for a column of inputs."""
    return torch.cat([x**i for i in range(1, DEGREE + 1)], 1)


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=256)
    parser.add_argument("--lr", type=float, default=0.01)
    args = exp.parse_args(parser, argv)
    device = helpers.setup(exp, args)
    exp.synthetic_data = True  # inputs are drawn at random by construction

    true_w = torch.randn(DEGREE, 1) * 5  # on the CPU: the batches are made there
    true_b = torch.randn(1) * 5
    with helpers.built_on(device):
        model = torch.nn.Linear(DEGREE, 1).to(device)

    def step() -> float:
        x = features(torch.randn(args.batch_size, 1))
        y = x @ true_w + true_b
        x, y = x.to(device), y.to(device)
        model.zero_grad(set_to_none=False)  # zero in place, as the legacy's old default
        loss = F.smooth_l1_loss(model(x), y)
        value = loss.item()  # the legacy loop's per-step read (a sync)
        loss.backward()
        with torch.no_grad():
            for param in model.parameters():
                param.add_(-args.lr * param.grad)
        return value

    helpers.train(exp, step, args.batch_size)
