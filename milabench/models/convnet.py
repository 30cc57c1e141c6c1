"""convnet / convnet_fp16: train a torchvision classifier on fake ImageNet.

The PyTorch ImageNet example's training step: resnet101 by default (``--arch``; the 10gb
and 5gb profiles pass resnet50), randomly initialised, cross-entropy, plain SGD with lr 0.1
(no momentum, no weight decay: the legacy test's optimizer, where the example has momentum
0.9 and weight decay 1e-4; ``--momentum`` and ``--weight-decay`` set them), on train JPEGs
with RandomResizedCrop + flip + normalise. ``convnet_fp16`` is the same module with
``--precision`` (autocast and, for fp16, a GradScaler); the standard profile passes
``auto``. One example is one image.

Legacy counterpart: milarun/models/convnet/conv_simple.py (mila-ao-2020-2), with its
``loss.item()`` each step (a host sync, part of the measured work). Left: torch.autocast +
GradScaler for fp16 (legacy: apex's FP16 optimizer); on Ampere and later GPUs the fp32
convolutions may run as TF32 (PyTorch's default; recorded in ``efficiency.settings``).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from milabench import helpers
from milabench.classifiers import build_model, check_arch, logits
from milabench.datasets import fake_imagenet
from milarun.experiment import BadTestArguments, Experiment


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", default="resnet101", help="torchvision.models network name")
    parser.add_argument("--batch-size", type=helpers.positive_int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.0, help="SGD momentum (legacy: 0)")
    parser.add_argument(
        "--weight-decay", type=float, default=0.0, help="SGD weight decay (legacy: 0)"
    )
    parser.add_argument(
        "--crop-size",
        type=helpers.positive_int,
        default=224,
        help="side of the random resized crop fed to the network",
    )
    parser.add_argument("--num-classes", type=helpers.positive_int, default=1000)
    helpers.add_data_arguments(parser)
    helpers.add_precision_argument(parser)
    args = exp.parse_args(parser, argv)
    check_arch(args.arch)
    device = helpers.setup(exp, args)

    transform = fake_imagenet.train_transform(args.crop_size)
    dataset = fake_imagenet.image_folder(exp.dataroot, "train", transform)
    helpers.use_dataset(exp, fake_imagenet.folder(exp.dataroot))
    if len(dataset.classes) > args.num_classes:
        raise BadTestArguments(
            f"bad test argument: --num-classes {args.num_classes} but the data has "
            f"{len(dataset.classes)} classes"
        )
    batches = helpers.endless(
        helpers.data_loader(dataset, args.batch_size, args.workers, seed=args.seed)
    )

    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    with helpers.built_on(device):
        model = build_model(args.arch, args.num_classes).to(device)
    model.train()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
    )
    precision = helpers.Precision(device, args.precision)
    exp.arguments["precision_used"] = precision.name  # what "auto" resolved to

    def step() -> torch.Tensor:
        images, labels = helpers.to_device(next(batches), device)
        with precision.autocast():
            loss = F.cross_entropy(logits(model(images)), labels)
        loss.item()  # as legacy it.log(loss=loss.item()): a host sync per step
        optimizer.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        precision.backward(loss, optimizer)
        return loss.detach()

    helpers.train(exp, step, args.batch_size)
