"""fake ImageNet: random-noise JPEGs under ImageNet/{train,val,test}/<class>/<i>.jpeg.

The legacy suite generated this data itself (torchvision FakeData: 512x512 RGB noise, 1000
classes; 1000 train, 50 val and 50 test images), so `download` makes exactly that and
`synthesize` makes the same layout at a chosen size (and image side, for tiny test data).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Callable

from milabench import datasets

NAME = "fake_imagenet"
DEFAULT_SIZE = 1000
IMAGE_SIZE = 512
CLASSES = 1000
SPLITS = {"train": 1.0, "val": 0.05, "test": 0.05}


def folder(root: Path) -> Path:
    return Path(root) / "ImageNet"


def _write_chunk(task: tuple[Path, str, range, int, int, int]) -> int:
    import numpy as np
    from PIL import Image

    base, split, indices, seed, side, classes = task
    written = 0
    for i in indices:
        rng = np.random.default_rng(datasets.item_seed(seed, split, i))
        label = int(rng.integers(classes))
        pixels = rng.integers(0, 256, size=(side, side, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
        written += datasets.write_new(base / split / str(label) / f"{i}.jpeg", buf.getvalue())
    return written


def synthesize(root: Path, size: int = DEFAULT_SIZE, seed: int = 0, workers: int = 1,
               image_size: int = IMAGE_SIZE, classes: int = CLASSES) -> Path:
    """``size`` train images (5% of that for val and test), deterministic for ``seed``."""
    base = folder(root)
    return datasets.synthesis(
        base, NAME, size, seed, unit="image",
        write=lambda: _write_synthetic(base, size, seed, workers, image_size, classes))


def _write_synthetic(base: Path, size: int, seed: int, workers: int, image_size: int,
                     classes: int) -> dict[str, int]:
    for split, share in SPLITS.items():
        datasets.map_chunks(_write_chunk, max(1, round(size * share)), workers,
                            lambda r: (base, split, r, seed, image_size, classes))
    return {"image_size": image_size}


def download(root: Path) -> Path:
    """The legacy data: 1000/50/50 images of 512x512 noise (it never came from the network)."""
    return synthesize(root, DEFAULT_SIZE, seed=0, workers=datasets.default_workers())


def image_folder(root: Path, split: str = "train",
                 transform: Callable[[Any], Any] | None = None) -> Any:
    """torchvision ImageFolder over one split (fails with the command if data is missing)."""
    from torchvision.datasets import ImageFolder

    base = datasets.require(folder(root), NAME, Path(root))
    return ImageFolder(str(base / split), transform=transform)


# -- transforms shared by the vision models ------------------------------------------
MEAN = (0.485, 0.456, 0.406)  # the ImageNet statistics torchvision's models expect
STD = (0.229, 0.224, 0.225)


def train_transform(crop_size: int = 224) -> Any:
    """The ImageNet training augmentation: random resized crop, flip, tensor, normalise."""
    from torchvision import transforms

    return transforms.Compose([
        transforms.RandomResizedCrop(crop_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])


def center_transform(size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> Any:
    """Resize the short side to ``size``, centre crop a square, then ``(x - mean) / std``.

    The generative models pick the range: mean=std=0.5 gives [-1, 1], std=1/255 gives
    [0, 255].
    """
    from torchvision import transforms

    return transforms.Compose([
        transforms.Resize(size),
        transforms.CenterCrop(size),
        transforms.ToTensor(),
        transforms.Normalize(mean, std),
    ])
