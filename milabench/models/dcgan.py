"""dcgan: the PyTorch DCGAN example on fake ImageNet.

Generator: noise (``--nz``) through transposed convolutions (batch norm + ReLU) up to a
3-channel image, tanh. Discriminator: strided convolutions (LeakyReLU, batch norm after the
first) down to one probability, sigmoid + BCE. Weights drawn from N(0, 0.02) (batch norm
scales from N(1, 0.02)); Adam lr 2e-4, betas (0.5, 0.999) for both. One step updates D on a
real and a fake batch, then G. Images are resized and centre cropped to ``--image-size``
(64; any power of two >= 16 sets the number of layers) and scaled to [-1, 1]. One example
is one real image.

Legacy counterpart: ``milarun/models/dcgan/main.py`` at mila-ao-2020-2. As there: cuDNN
autotuning on (``cudnn.benchmark``) on CUDA; the batch is loaded and copied inside the timed
block; D's real and fake losses are backpropagated one after the other; and every step
reads six values on the host (D(x), D(G(z)) before and after D's update, and the three
losses, each ``.item()`` a device sync that is part of the measured workload).

Differences left: full batches only, in pinned memory on CUDA (legacy: the last partial
batch of an epoch, unpinned); no ``--ngpu`` DataParallel (one device per instance).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from milabench import helpers
from milabench.datasets import fake_imagenet
from milarun.experiment import BadTestArguments, Experiment


def stages(image_size: int) -> int:
    """Resolution doublings between the 4x4 core and the image (3 at 64 px)."""
    if image_size < 16 or image_size & (image_size - 1):
        raise BadTestArguments(
            f"bad test argument: --image-size {image_size} (a power of two >= 16, e.g. 64)"
        )
    return image_size.bit_length() - 4


def generator(nz: int, ngf: int, image_size: int) -> nn.Sequential:
    """nz x 1 x 1 -> (ngf * 2^k) x 4 x 4 -> ... -> ngf x s/2 x s/2 -> 3 x s x s."""
    k = stages(image_size)
    layers: list[nn.Module] = [
        nn.ConvTranspose2d(nz, ngf * 2**k, 4, 1, 0, bias=False),
        nn.BatchNorm2d(ngf * 2**k),
        nn.ReLU(True),
    ]
    for i in range(k, 0, -1):
        layers += [
            nn.ConvTranspose2d(ngf * 2**i, ngf * 2 ** (i - 1), 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2 ** (i - 1)),
            nn.ReLU(True),
        ]
    layers += [nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh()]
    return nn.Sequential(*layers)


def discriminator(ndf: int, image_size: int) -> nn.Sequential:
    """3 x s x s -> ndf x s/2 x s/2 -> ... -> (ndf * 2^k) x 4 x 4 -> 1 x 1 x 1."""
    k = stages(image_size)
    layers: list[nn.Module] = [
        nn.Conv2d(3, ndf, 4, 2, 1, bias=False),
        nn.LeakyReLU(0.2, inplace=True),
    ]
    for i in range(k):
        layers += [
            nn.Conv2d(ndf * 2**i, ndf * 2 ** (i + 1), 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2 ** (i + 1)),
            nn.LeakyReLU(0.2, inplace=True),
        ]
    layers += [nn.Conv2d(ndf * 2**k, 1, 4, 1, 0, bias=False), nn.Sigmoid()]
    return nn.Sequential(*layers)


def init_weights(module: nn.Module) -> None:
    """The DCGAN paper's initialisation."""
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=128)
    parser.add_argument("--image-size", type=helpers.positive_int, default=64)
    parser.add_argument(
        "--nz", type=helpers.positive_int, default=100, help="size of the latent vector"
    )
    parser.add_argument(
        "--ngf", type=helpers.positive_int, default=64, help="generator feature maps"
    )
    parser.add_argument(
        "--ndf", type=helpers.positive_int, default=64, help="discriminator feature maps"
    )
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--beta1", type=float, default=0.5)
    helpers.add_data_arguments(parser)
    args = exp.parse_args(parser, argv)
    stages(args.image_size)
    device = helpers.setup(exp, args)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as the legacy test; picked per shape

    transform = fake_imagenet.center_transform(args.image_size, (0.5,) * 3, (0.5,) * 3)
    dataset = fake_imagenet.image_folder(exp.dataroot, "train", transform)
    helpers.use_dataset(exp, fake_imagenet.folder(exp.dataroot))
    batches = helpers.endless(
        helpers.data_loader(dataset, args.batch_size, args.workers, seed=args.seed)
    )

    with helpers.built_on(device):
        net_g = generator(args.nz, args.ngf, args.image_size).to(device)
    with helpers.built_on(device):
        net_d = discriminator(args.ndf, args.image_size).to(device)
    net_g.apply(init_weights)
    net_d.apply(init_weights)
    betas = (args.beta1, 0.999)
    opt_g = torch.optim.Adam(net_g.parameters(), lr=args.lr, betas=betas)
    opt_d = torch.optim.Adam(net_d.parameters(), lr=args.lr, betas=betas)
    bce = nn.BCELoss()
    real_label = torch.ones(args.batch_size, device=device)  # full batches only
    fake_label = torch.zeros(args.batch_size, device=device)
    losses: dict[str, float] = {}

    def step() -> float:
        real = helpers.to_device(next(batches), device)[0]
        # D: maximise log D(x) + log(1 - D(G(z))), the two terms backpropagated in turn
        net_d.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        output = net_d(real).view(-1)
        err_real = bce(output, real_label)
        err_real.backward()
        output.mean().item()  # D(x): read on the host as the legacy did (a sync)
        noise = torch.randn(args.batch_size, args.nz, 1, 1, device=device)
        fake = net_g(noise)
        output = net_d(fake.detach()).view(-1)
        err_fake = bce(output, fake_label)
        err_fake.backward()
        output.mean().item()  # D(G(z)) before D's update
        opt_d.step()
        # G: maximise log D(G(z)), with the just-updated D
        net_g.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        output = net_d(fake).view(-1)
        err_g = bce(output, real_label)
        err_g.backward()
        output.mean().item()  # D(G(z)) after it
        opt_g.step()
        losses.update(loss_d=err_real.item() + err_fake.item(), loss_g=err_g.item())
        return losses["loss_d"] + losses["loss_g"]

    helpers.train(exp, step, args.batch_size)
    for name, value in losses.items():
        exp.metric(name, value)
