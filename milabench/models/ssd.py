"""ssd: MLPerf SSD v0.6 (SSD300, ResNet-34 backbone) trained on COCO 2017 detection.

One example is one image. The network: torchvision's ResNet-34 up to layer3, with layer3's
stride set to 1 (a 38x38x256 map at 300 px), the MLPerf extra layers down to 1x1, and a
location and a class head (3x3 convolutions) on each of the six maps with 4,6,6,6,4,4
default boxes per cell: 8732 anchors. Random weights, no download (the legacy backbone was
ImageNet-pretrained: the same computation). The data workers crop, flip, resize, jitter and
normalise each image and encode its boxes into per-anchor targets (milabench/ssd_parts.py);
the loss is SmoothL1 + cross-entropy with 3:1 hard-negative mining.

``--image-size`` is the input resolution (300 = SSD300); other sizes keep the layers, whose
maps then shrink or grow (and with them the anchor count), down to 257, the smallest input
the extra layers reduce to a 1x1 map.

Legacy counterpart: milarun/models/ssd/ (train.py, ssd300.py, utils.py) and
milarun/datasets/coco/ at mila-ao-2020-2, with its ``loss.item()`` each step (a host sync,
part of the measured work), SGD lr 1e-3 momentum 0.9 weight decay 5e-4 and 4 loader
workers. Left: random weights; crowd and degenerate boxes dropped at load (a zero-width box
gave the legacy an infinite loss); the crop and flip draw from torch's generator.
"""

from __future__ import annotations

import argparse

import torch
import torchvision
from torch import nn

from milabench import helpers, ssd_parts
from milabench.datasets import coco
from milarun.experiment import Experiment

NUM_CLASSES = 81  # the 80 COCO categories + background
CHANNELS = (256, 512, 512, 256, 256, 256)  # of the six maps the heads read
# The extra layers after the backbone: (1x1 width, 3x3 stride, 3x3 padding) per block.
EXTRA = ((256, 2, 1), (256, 2, 1), (128, 2, 1), (128, 1, 0), (128, 1, 0))


def feature_sizes(image_size: int) -> list[int]:
    """The six maps' sides for a square input (38, 19, 10, 5, 3, 1 at 300 px)."""

    def conv(n: int, kernel: int, stride: int, padding: int) -> int:
        return (n + 2 * padding - kernel) // stride + 1

    # conv1 and the max pool halve, layer2 halves, layer3 (stride 1 here) keeps.
    side = conv(conv(conv(image_size, 7, 2, 3), 3, 2, 1), 3, 2, 1)
    sides = [side]
    for _, stride, padding in EXTRA:
        sides.append(conv(sides[-1], 3, stride, padding))
    return sides


MIN_IMAGE_SIZE = next(s for s in range(1, 1000) if feature_sizes(s)[-1] >= 1)


class SSD300(nn.Module):
    """SSD300-ResNet34: images B x 3 x S x S -> (offsets B x 4 x A, class scores B x C x A)."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        resnet = torchvision.models.resnet34(weights=None)
        # conv1 .. layer3; layer3's first block stops striding (its 3x3 and its shortcut),
        # so the first map is 1/8 of the input instead of 1/16.
        self.backbone = nn.Sequential(*list(resnet.children())[:7])
        first = resnet.layer3[0]
        first.conv1.stride = (1, 1)
        first.downsample[0].stride = (1, 1)
        self.extra = nn.ModuleList()
        for (width, stride, padding), c_in, c_out in zip(EXTRA, CHANNELS, CHANNELS[1:]):
            self.extra.append(
                nn.Sequential(
                    nn.Conv2d(c_in, width, 1),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(width, c_out, 3, stride=stride, padding=padding),
                    nn.ReLU(inplace=True),
                )
            )
        counts = ssd_parts.boxes_per_cell()
        self.num_classes = num_classes
        self.loc = nn.ModuleList(
            nn.Conv2d(c, n * 4, 3, padding=1) for c, n in zip(CHANNELS, counts)
        )
        self.conf = nn.ModuleList(
            nn.Conv2d(c, n * num_classes, 3, padding=1) for c, n in zip(CHANNELS, counts)
        )
        # The layers MLPerf adds start from Xavier; the backbone keeps torchvision's init.
        for module in (self.extra, self.loc, self.conf):
            for param in module.parameters():
                if param.dim() > 1:
                    nn.init.xavier_uniform_(param)

    def features(self, images: torch.Tensor) -> list[torch.Tensor]:
        maps = [self.backbone(images)]
        for block in self.extra:
            maps.append(block(maps[-1]))
        return maps

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        maps = self.features(images)
        batch = images.size(0)
        # (B, n*4, H, W) viewed as (B, 4, n*H*W): anchors ordered shape, row, column, the
        # order of ssd_parts.default_boxes.
        locs = [head(x).view(batch, 4, -1) for head, x in zip(self.loc, maps)]
        confs = [head(x).view(batch, self.num_classes, -1) for head, x in zip(self.conf, maps)]
        return torch.cat(locs, 2).contiguous(), torch.cat(confs, 2).contiguous()


def anchors(image_size: int = ssd_parts.BASE_SIZE) -> torch.Tensor:
    """The default boxes (A x 4, xywh) matching the network's maps at ``image_size``."""
    return ssd_parts.default_boxes(image_size, feature_sizes(image_size))


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=64)
    # MLPerf SSD v0.6 as the legacy ran it: SGD lr 1e-3, momentum 0.9, weight decay 5e-4.
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--image-size",
        type=helpers.positive_int,
        default=ssd_parts.BASE_SIZE,
        help=f"input resolution (>= {MIN_IMAGE_SIZE}; 300 = SSD300)",
    )
    helpers.add_data_arguments(parser, workers=4)  # the legacy loader's 4 workers
    args = exp.parse_args(parser, argv)
    helpers.reject(
        (
            [f"--image-size {args.image_size}: the SSD extra layers need >= {MIN_IMAGE_SIZE}"]
            if args.image_size < MIN_IMAGE_SIZE
            else []
        )
        + ([f"--workers {args.workers} (>= 0)"] if args.workers < 0 else [])
    )
    device = helpers.setup(exp, args)

    boxes = anchors(args.image_size)
    transform = ssd_parts.TrainTransform(ssd_parts.BoxEncoder(boxes), args.image_size)
    train_set = coco.transformed_train_set(exp.dataroot, transform)
    helpers.use_dataset(exp, coco.folder(exp.dataroot))
    loader = helpers.data_loader(train_set, args.batch_size, args.workers, seed=args.seed)
    batches = helpers.endless(loader)

    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed input size, as the legacy run
    with helpers.built_on(device):
        model = SSD300().to(device)
    model.train()
    criterion = ssd_parts.MultiBoxLoss(boxes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)

    def step() -> torch.Tensor:
        images, gloc, glabel = helpers.to_device(next(batches), device)
        # The legacy step asked for the input's gradient too (one more backward
        # convolution at conv1): kept, it is part of the measured work.
        images.requires_grad_(True)
        ploc, plabel = model(images)
        loss = criterion(ploc, plabel, gloc.transpose(1, 2), glabel)
        loss.item()  # as legacy it.log(loss=loss.item()): a host sync per step
        optimizer.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        loss.backward()
        optimizer.step()
        return loss.detach()

    helpers.train(exp, step, args.batch_size)
