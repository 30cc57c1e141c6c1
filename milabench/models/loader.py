"""loader: the ImageNet input pipeline alone, no model.

Reads fake ImageNet train JPEGs through a DataLoader with the training augmentation
(RandomResizedCrop + flip + normalise); each step takes the next batch, copies it to the
device and waits for the copy. One example is one image, so the rate is the images/s that
the CPUs (decoding and augmenting in ``--workers`` processes) can feed to one device.

Legacy counterpart: milarun/models/loader.py (mila-ao-2020-2). Left: nothing known.
"""

from __future__ import annotations

import argparse

from milabench import helpers
from milabench.datasets import fake_imagenet
from milarun.experiment import Experiment


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=256)
    parser.add_argument(
        "--crop-size",
        type=helpers.positive_int,
        default=224,
        help="side of the random resized crop",
    )
    helpers.add_data_arguments(parser)
    args = exp.parse_args(parser, argv)
    device = helpers.setup(exp, args)

    transform = fake_imagenet.train_transform(args.crop_size)
    dataset = fake_imagenet.image_folder(exp.dataroot, "train", transform)
    helpers.use_dataset(exp, fake_imagenet.folder(exp.dataroot))
    batches = helpers.endless(
        helpers.data_loader(dataset, args.batch_size, args.workers, seed=args.seed)
    )
    last: list = [None]

    def step() -> None:
        last[0] = helpers.to_device(next(batches), device)
        # What is measured is the delivery of the batch to the device, so the copy is
        # waited for here (the one step that syncs on purpose).
        exp.sync()

    helpers.train(exp, step, args.batch_size)
    images, _ = last[0]
    # A sanity value (normalised noise averages near 0.2), read once the timing is over.
    exp.metric("pixel_mean", images.float().mean().item())
