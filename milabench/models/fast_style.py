"""fast_style: fast neural style transfer training (Johnson et al., the PyTorch example).

TransformerNet (reflection-padded convolutions with instance norm, 5 residual blocks,
nearest-upsample convolutions) learns to restyle fake ImageNet images (resized and centre
cropped to ``--image-size``, in [0, 255]) under a perceptual loss: content = MSE of the
relu2_2 features of output and input (x ``--content-weight`` 1e5), style = MSE of the Gram
matrices at relu1_2, relu2_2, relu3_3, relu4_3 against those of a style image
(x ``--style-weight`` 1e10); Adam lr 1e-3.

Differences from the example, so that nothing is downloaded: the VGG16 feature extractor
is torchvision's vgg16(weights=None), RANDOMLY initialised (frozen), not the ImageNet
weights, and the style image is a deterministic colour pattern of stripes and checks drawn
at ``--style-size``. The compute per step is the same. One example is one image.

Legacy counterpart: milarun/models/neural_style/neural_style.py (mila-ao-2020-2), with its
``loss.item()`` each step (a host sync, part of the measured work). Left: the random VGG16
and the drawn style image above.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from milabench import helpers
from milabench.datasets import fake_imagenet
from milarun.experiment import BadTestArguments, Experiment

VGG_SLICES = (4, 9, 16, 23)  # vgg16.features up to relu1_2, relu2_2, relu3_3, relu4_3
CONTENT_LAYER = 1  # relu2_2


class ConvLayer(nn.Sequential):
    """Reflection padding then a convolution (after a nearest upsampling if asked)."""

    def __init__(
        self, cin: int, cout: int, kernel: int, stride: int = 1, upsample: int | None = None
    ):
        layers: list[nn.Module] = [nn.Upsample(scale_factor=upsample)] if upsample else []
        super().__init__(
            *layers, nn.ReflectionPad2d(kernel // 2), nn.Conv2d(cin, cout, kernel, stride)
        )


def conv_norm_relu(
    cin: int, cout: int, kernel: int, stride: int = 1, upsample: int | None = None
) -> list[nn.Module]:
    return [
        ConvLayer(cin, cout, kernel, stride, upsample),
        nn.InstanceNorm2d(cout, affine=True),
        nn.ReLU(),
    ]


class ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(
            *conv_norm_relu(channels, channels, 3),
            ConvLayer(channels, channels, 3),
            nn.InstanceNorm2d(channels, affine=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def transformer_net() -> nn.Sequential:
    """3 x H x W -> 3 x H x W (H, W multiples of 4): down twice, 5 residual blocks, up twice."""
    return nn.Sequential(
        *conv_norm_relu(3, 32, 9),
        *conv_norm_relu(32, 64, 3, 2),
        *conv_norm_relu(64, 128, 3, 2),
        *(ResidualBlock(128) for _ in range(5)),
        *conv_norm_relu(128, 64, 3, upsample=2),
        *conv_norm_relu(64, 32, 3, upsample=2),
        ConvLayer(32, 3, 9),
    )


class VGGFeatures(nn.Module):
    """Frozen, randomly initialised VGG16 features at the four style layers."""

    def __init__(self):
        super().__init__()
        features = torchvision.models.vgg16(weights=None).features
        bounds = (0, *VGG_SLICES)
        self.slices = nn.ModuleList(features[a:b] for a, b in zip(bounds, bounds[1:]))
        self.requires_grad_(False)
        self.register_buffer("mean", torch.tensor(fake_imagenet.MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(fake_imagenet.STD).view(1, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Features of images in [0, 255], normalised as VGG expects."""
        x = (x / 255 - self.mean) / self.std
        out = []
        for block in self.slices:
            x = block(x)
            out.append(x)
        return out


def gram(features: torch.Tensor) -> torch.Tensor:
    """Channel correlations, normalised by the feature map's size."""
    b, c, h, w = features.shape
    flat = features.reshape(b, c, h * w)
    return flat @ flat.transpose(1, 2) / (c * h * w)


def style_image(size: int) -> torch.Tensor:
    """A deterministic 1 x 3 x size x size pattern in [0, 255]: diagonal stripes (red),
    checks (green) and a sine wave (blue)."""
    y, x = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    stripes = ((x + y) // max(1, size // 16)) % 2
    checks = (x // max(1, size // 8) + y // max(1, size // 8)) % 2
    wave = 0.5 + 0.5 * torch.sin(x.float() * 12.0 / size) * torch.cos(y.float() * 7.0 / size)
    return torch.stack([stripes.float(), checks.float() * 0.8 + 0.1, wave])[None] * 255


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=128)
    parser.add_argument(
        "--image-size",
        type=helpers.positive_int,
        default=64,
        help="training images are resized and cropped to this (multiple of 4)",
    )
    parser.add_argument(
        "--style-size",
        type=helpers.positive_int,
        default=256,
        help="side of the generated style image",
    )
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--content-weight", type=float, default=1e5)
    parser.add_argument("--style-weight", type=float, default=1e10)
    helpers.add_data_arguments(parser)
    args = exp.parse_args(parser, argv)
    if args.image_size % 4:
        raise BadTestArguments(
            f"bad test argument: --image-size {args.image_size} (a multiple of 4)"
        )
    device = helpers.setup(exp, args)

    transform = fake_imagenet.center_transform(args.image_size, (0.0,) * 3, (1 / 255,) * 3)
    dataset = fake_imagenet.image_folder(exp.dataroot, "train", transform)
    helpers.use_dataset(exp, fake_imagenet.folder(exp.dataroot))
    batches = helpers.endless(
        helpers.data_loader(dataset, args.batch_size, args.workers, seed=args.seed)
    )

    with helpers.built_on(device):
        model = transformer_net().to(device)
    model.train()
    with helpers.built_on(device):
        vgg = VGGFeatures().to(device).eval()
    with torch.no_grad():
        style_grams = [gram(f) for f in vgg(style_image(args.style_size).to(device))]
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    parts: dict[str, torch.Tensor] = {}

    def step() -> torch.Tensor:
        x = next(batches)[0].to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        y = model(x)
        feats_y = vgg(y)
        with torch.no_grad():
            content_target = vgg(x)[CONTENT_LAYER]
        content = args.content_weight * F.mse_loss(feats_y[CONTENT_LAYER], content_target)
        style = args.style_weight * sum(
            F.mse_loss(gram(f), g.expand(f.shape[0], -1, -1)) for f, g in zip(feats_y, style_grams)
        )
        loss = content + style
        loss.backward()
        loss.item()  # as legacy it.log(loss=loss.item()): a host sync per step
        optimizer.step()
        parts.update(content_loss=content.detach(), style_loss=style.detach())
        return loss.detach()

    helpers.train(exp, step, args.batch_size)
    for name, value in parts.items():
        exp.metric(name, value.item())
