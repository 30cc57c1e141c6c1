"""toy_reg: fit a degree-4 polynomial with one Linear layer on x..x^4 features."""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from milabench import helpers
from milarun.experiment import Experiment

DEGREE = 4


def features(x: torch.Tensor) -> torch.Tensor:
    """[x, x^2, x^3, x^4] for a column of inputs."""
    return torch.cat([x ** i for i in range(1, DEGREE + 1)], 1)


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.1)
    args = exp.parse_args(parser, argv)
    device = helpers.setup(exp, args)
    exp.synthetic_data = True  # inputs are drawn at random by construction

    true_w = torch.randn(DEGREE, 1, device=device) * 5
    true_b = torch.randn(1, device=device) * 5
    model = torch.nn.Linear(DEGREE, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    def step() -> torch.Tensor:
        x = features(torch.randn(args.batch_size, 1, device=device))
        y = x @ true_w + true_b
        loss = F.smooth_l1_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    helpers.train(exp, step, args.batch_size)
