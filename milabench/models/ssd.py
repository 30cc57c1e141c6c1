"""ssd: SSD300 (VGG16 backbone, torchvision) trained from scratch on COCO 2017 detection.

One example is one image. The model returns its loss dict in train mode (box regression
and classification with hard negative mining); the loss is their sum. Random weights, no
download. Images arrive in [0, 1] and the model normalises them with the ImageNet
statistics: torchvision's default (std 1/255) matches caffe-pretrained VGG features and
makes a randomly initialised network diverge at lr 1e-3.

``--image-size`` is the network's input resolution (300 = SSD300); other sizes keep the
architecture and scale the default-box steps, down to 268, the smallest input the
VGG16 extra layers reduce to a 1x1 map.
"""

from __future__ import annotations

import argparse

import torch
import torchvision
from torchvision.models.detection.transform import GeneralizedRCNNTransform

from milabench import helpers
from milabench.datasets import coco
from milarun.experiment import BadTestArguments, Experiment

NUM_CLASSES = 81  # the 80 COCO categories + background
BASE_SIZE = 300
MIN_IMAGE_SIZE = 268
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def build_model(image_size: int = BASE_SIZE) -> torch.nn.Module:
    """ssd300_vgg16 with random weights, 81 classes, input ``image_size`` x ``image_size``."""
    model = torchvision.models.detection.ssd300_vgg16(
        weights=None, weights_backbone=None, num_classes=NUM_CLASSES,
        image_mean=MEAN, image_std=STD)
    if image_size != BASE_SIZE:
        # ssd300_vgg16 fixes its input size; resize to ours instead and put the default
        # boxes at the same relative places on the (smaller or larger) feature maps.
        model.transform = GeneralizedRCNNTransform(
            image_size, image_size, MEAN, STD, size_divisible=1,
            fixed_size=(image_size, image_size))
        generator = model.anchor_generator
        generator.steps = [s * image_size / BASE_SIZE for s in generator.steps]
    return model


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=64)
    # The legacy run (MLPerf SSD-ResNet34, batch 128) used SGD lr 1e-3, momentum 0.9,
    # weight decay 5e-4: the same here.
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--image-size", type=helpers.positive_int, default=BASE_SIZE,
                        help=f"input resolution (>= {MIN_IMAGE_SIZE}; 300 = SSD300)")
    helpers.add_data_arguments(parser)
    args = exp.parse_args(parser, argv)
    if args.image_size < MIN_IMAGE_SIZE:
        raise BadTestArguments(
            f"bad test argument: --image-size {args.image_size}: SSD300's VGG16 layers "
            f"need >= {MIN_IMAGE_SIZE}")
    if args.workers < 0:
        raise BadTestArguments(f"bad test argument: --workers {args.workers} (>= 0)")
    device = helpers.setup(exp, args)

    train_set = coco.detection_train_set(exp.dataroot, args.image_size)
    helpers.use_dataset(exp, coco.folder(exp.dataroot))
    loader = helpers.data_loader(train_set, args.batch_size, args.workers,
                                 collate_fn=coco.collate, seed=args.seed)
    batches = helpers.endless(loader)

    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed input size
    model = build_model(args.image_size).to(device)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9,
                                weight_decay=5e-4)

    def step() -> torch.Tensor:
        images, targets = helpers.to_device(next(batches), device)
        losses = model(images, targets)
        loss = sum(losses.values())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    helpers.train(exp, step, args.batch_size)
