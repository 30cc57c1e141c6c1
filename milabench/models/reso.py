"""reso: super-resolution with a sub-pixel CNN (ESPCN, the PyTorch super_resolution example).

Four convolutions (5x5 64, 3x3 64, 3x3 32 with ReLU, then 3x3 to factor^2 channels) and a
PixelShuffle that rearranges those channels into a factor-times larger image. Trained with MSE
on BSDS500 train images: the luminance (Y) of a centre crop (256) is the target, the crop
down-scaled by the factor (128 for 2) the input. Adam at the legacy learning rate 0.1.
Each timed step includes loading its batch.

Loaded and counted as the legacy test did: a plain DataLoader cycled over, so each epoch
(200 images in the real set) forks its ``--workers`` anew and ends with a partial batch
(8 images at batch 64), and every step counts ``--batch-size`` examples, the partial one
too. One example is thus a little less than one image: ``per_example.images`` (200/256 on
the real set at batch 64) gives the rate in images.

Legacy counterpart: milarun/models/subpixel.py (mila-ao-2020-2), with its ``loss.item()``
each step between forward and backward (a host sync, part of the measured work), and its
input down-scaled by the bilinear filter of torchvision's Resize.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

from milabench import helpers
from milabench.datasets import bsds500
from milarun.experiment import Experiment


class SubPixelCNN(nn.Module):
    """ESPCN: features at low resolution, then factor^2 channels shuffled into pixels."""

    def __init__(self, upscale_factor: int, channels: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 64, 5, padding=2)
        self.conv2 = nn.Conv2d(64, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 32, 3, padding=1)
        self.conv4 = nn.Conv2d(32, channels * upscale_factor**2, 3, padding=1)
        self.shuffle = nn.PixelShuffle(upscale_factor)
        relu_gain = nn.init.calculate_gain("relu")
        for conv in (self.conv1, self.conv2, self.conv3):
            nn.init.orthogonal_(conv.weight, relu_gain)
        nn.init.orthogonal_(self.conv4.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        return self.shuffle(self.conv4(x))


def check_arguments(args: argparse.Namespace) -> None:
    """One-line BadTestArguments for values the data or the network cannot take."""
    problems = []  # --batch-size: the parser's positive_int
    if args.workers < 0:
        problems.append(f"--workers {args.workers} (>= 0)")
    if args.upscale_factor < 1:
        problems.append(f"--upscale-factor {args.upscale_factor} (>= 1)")
    if not args.upscale_factor <= args.crop_size <= bsds500.SHORT:
        problems.append(
            f"--crop-size {args.crop_size} (from the upscale factor to "
            f"{bsds500.SHORT}, the short side of BSDS500 images)"
        )
    helpers.reject(problems)


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--upscale-factor", type=int, default=2)
    parser.add_argument(
        "--crop-size",
        type=int,
        default=256,
        help="target side (made divisible by the factor); input is this / factor",
    )
    helpers.add_data_arguments(parser)
    args = exp.parse_args(parser, argv)
    check_arguments(args)
    device = helpers.setup(exp, args)

    data = bsds500.reso_train_set(exp.dataroot, args.crop_size, args.upscale_factor)
    helpers.use_dataset(exp, bsds500.folder(exp.dataroot))
    batches = helpers.endless(
        helpers.data_loader(data, args.batch_size, args.workers, seed=args.seed, legacy_epochs=True)
    )
    # Each step counts a whole batch, the epoch's last (partial) one too, as legacy set_count
    counted = math.ceil(len(data) / args.batch_size) * args.batch_size
    exp.metric("per_example.images", len(data) / counted)
    with helpers.built_on(device):
        model = SubPixelCNN(args.upscale_factor).to(device)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def step() -> torch.Tensor:
        source, target = helpers.to_device(next(batches), device)
        optimizer.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        loss = F.mse_loss(model(source), target)
        loss.item()  # as legacy it.log(loss=loss.item()): a host sync per step
        loss.backward()
        optimizer.step()
        return loss.detach()

    helpers.train(exp, step, args.batch_size)
