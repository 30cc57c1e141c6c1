"""resnet50: torchvision ResNet-50 training steps, bf16 autocast, channels_last, data on the
device; images/s.

The throughput the published ResNet-50 figures measure (NGC's AMP runs, milabench v2's
"without IO"): a fixed batch of random 224 px images and labels made on the device, so
nothing but the GPU is timed; cross-entropy, SGD with momentum 0.9 and weight decay 5e-5
(NVIDIA's recipe) at a small learning rate (a fixed batch of random labels is memorised,
and the recipe's 0.256 without its warm-up risks a NaN, as the 2020 scaling test had on an
H100 with SGD). One example is one image. FLOPs are counted
(FlopCounterMode). Modern suite: the 2020 ``convnet`` reads JPEGs and keeps fp32.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from milabench import helpers, modern
from milarun.experiment import BadTestArguments, Experiment


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=256)
    parser.add_argument("--image-size", type=helpers.positive_int, default=224)
    parser.add_argument("--num-classes", type=helpers.positive_int, default=1000)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument(
        "--no-channels-last",
        action="store_true",
        help="keep the NCHW layout (channels_last is the default, as in NVIDIA's recipe)",
    )
    modern.add_arguments(parser)
    args = exp.parse_args(parser, argv)
    if args.image_size < 32:  # five stride-2 stages
        raise BadTestArguments(f"bad test argument: --image-size {args.image_size} (>= 32)")
    device = helpers.setup(exp, args)
    exp.synthetic_data = True  # random images made on the device
    setup = modern.Setup(exp, args, device)
    layout = torch.contiguous_format if args.no_channels_last else torch.channels_last
    setup.settings["channels_last"] = not args.no_channels_last
    size = f"ResNet-50 at {args.image_size} px, batch {args.batch_size}"
    exp.arguments["workload"] = size

    with modern.fits(exp, size, device):
        import torchvision

        if device.type == "cuda":
            torch.backends.cudnn.benchmark = True
        with helpers.built_on(device):
            eager = torchvision.models.resnet50(weights=None, num_classes=args.num_classes)
        eager = eager.to(device, memory_format=layout)
        eager.train()
        model = setup.maybe_compile(eager)
        optimizer = torch.optim.SGD(eager.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-5)
        setup.settings["optimizer"] = "SGD (momentum 0.9)"
        setup.record_attention("none (a convolutional network)")
        gen = torch.Generator(device=device).manual_seed(args.seed)
        shape = (args.batch_size, 3, args.image_size, args.image_size)
        images = torch.randn(shape, generator=gen, device=device).contiguous(memory_format=layout)
        labels = torch.randint(
            0, args.num_classes, (args.batch_size,), generator=gen, device=device
        )

        stepper = setup.stepper(lambda net: F.cross_entropy(net(images), labels), optimizer)

        setup.train(stepper(model), args.batch_size, eager_step=stepper(eager))
