"""vae: the PyTorch-examples variational auto-encoder on MNIST.

An MLP encoder 784-400 -> (mu, logvar) of 20 dimensions, the reparameterisation trick, an MLP
decoder 20-400-784 with a sigmoid; loss = binary cross-entropy (summed) + KL divergence;
Adam. One example is one image; each timed step includes loading its batch.

Legacy counterpart: ``milarun/models/vae.py`` at mila-ao-2020-2. As there: one DataLoader
worker by default (the legacy hard-coded 1 on CUDA, pinned memory), forked anew at each
epoch (a plain DataLoader cycled over), every epoch ending with its partial batch (96
images at batch 128) counted as the images it holds, the batch loaded and copied inside
the timed block, and the loss read on the host every step (``loss.item()`` after the
backward pass: a device sync that is part of the measured workload).

Differences left: on a CPU the legacy loaded in the training process (no worker); here
``--workers 0`` does that.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

from milabench import helpers
from milabench.datasets import mnist
from milarun.experiment import BadTestArguments, Experiment

PIXELS = 28 * 28


class VAE(nn.Module):
    """Encoder to a diagonal Gaussian over ``latent`` dims; decoder back to pixel probabilities."""

    def __init__(self, hidden: int = 400, latent: int = 20):
        super().__init__()
        self.encode_hidden = nn.Linear(PIXELS, hidden)
        self.encode_mu = nn.Linear(hidden, latent)
        self.encode_logvar = nn.Linear(hidden, latent)
        self.decode_hidden = nn.Linear(latent, hidden)
        self.decode_out = nn.Linear(hidden, PIXELS)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = F.relu(self.encode_hidden(x))
        mu, logvar = self.encode_mu(h), self.encode_logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)  # differentiable sample
        recon = torch.sigmoid(self.decode_out(F.relu(self.decode_hidden(z))))
        return recon, mu, logvar


def vae_loss(
    recon: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor
) -> torch.Tensor:
    """Reconstruction BCE (summed over pixels and batch) + KL(q(z|x) || N(0, I))."""
    bce = F.binary_cross_entropy(recon, x, reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    helpers.add_data_arguments(parser, workers=1)  # the legacy's fixed 1 worker
    args = exp.parse_args(parser, argv)
    if args.workers < 0:  # --batch-size: the parser's positive_int
        raise BadTestArguments(f"bad test argument: --workers {args.workers} (>= 0)")
    device = helpers.setup(exp, args)

    from torchvision.transforms import ToTensor

    data = mnist.train_set(exp.dataroot, transform=ToTensor())
    helpers.use_dataset(exp, mnist.folder(exp.dataroot))
    batches = helpers.endless(
        helpers.data_loader(data, args.batch_size, args.workers, seed=args.seed, legacy_epochs=True)
    )
    with helpers.built_on(device):
        model = VAE().to(device)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    held = [args.batch_size]  # the images of the last step: the legacy set_count(len(data))

    def step() -> float:
        images, _ = helpers.to_device(next(batches), device)
        x = images.view(-1, PIXELS)
        held[0] = x.shape[0]
        optimizer.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        recon, mu, logvar = model(x)
        loss = vae_loss(recon, x, mu, logvar)
        loss.backward()
        value = loss.item()  # the legacy loop's per-step read (a sync)
        optimizer.step()
        return value / x.shape[0]  # per image, as the example prints it

    helpers.train(exp, step, args.batch_size, examples=lambda: held[0])
