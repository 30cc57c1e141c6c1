"""fake ImageNet: random-noise JPEGs under ImageNet/{train,val,test}/<class>/<i>.jpeg.

The legacy suite generated this data itself (torchvision FakeData: 512x512 RGB noise, labels
drawn uniformly from 1000 classes, saved by PIL at its default JPEG quality 75; 100,000
train, 5,000 val and 5,000 test images), so `download` makes exactly that and `synthesize`
the same layout at a chosen size (and image side, for tiny test data). Val and test hold 5%
of the train size each, at least one image. As in the legacy data, a class folder exists
only where an image drew that class: at the default size every class has about 100 train
images, while a small set has fewer classes (ImageFolder counts the folders). Unlike the
legacy writer, whose four processes each named their images 0..n/4-1 and so overwrote the
~0.15% that drew the same class and number, every image has its own number: exactly ``size``.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from milabench import datasets

NAME = "fake_imagenet"
DEFAULT_SIZE = 100_000  # the legacy train set (with 5,000 val and 5,000 test images)
IMAGE_SIZE = 512
CLASSES = 1000
QUALITY = 75  # PIL's default, which the legacy writer used
SPLITS = {"train": 1.0, "val": 0.05, "test": 0.05}
CHUNK = 200  # images per task: a progress step of well under a second per worker


def folder(root: Path) -> Path:
    return Path(root) / "ImageNet"


def split_sizes(size: int) -> dict[str, int]:
    """Images per split for ``size`` train images (val and test: 5%, at least 1)."""
    return {split: max(1, round(size * share)) for split, share in SPLITS.items()}


def _write_chunk(task: tuple[Path, str, range, int, int, int]) -> int:
    """Write the images ``indices`` of ``split`` (those already there are whole: kept);
    returns how many images the chunk covered."""
    import numpy as np
    from PIL import Image

    base, split, indices, seed, side, classes = task
    for i in indices:
        rng = np.random.default_rng(datasets.item_seed(seed, split, i))
        path = base / split / str(int(rng.integers(classes))) / f"{i}.jpeg"
        if path.exists():  # written before an interruption (atomically: complete)
            continue
        pixels = rng.integers(0, 256, size=(side, side, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=QUALITY)
        datasets.write_new(path, buf.getvalue())
    return len(indices)


def synthesize(
    root: Path,
    size: int = DEFAULT_SIZE,
    seed: int = 0,
    workers: int = 1,
    image_size: int = IMAGE_SIZE,
    classes: int = CLASSES,
) -> Path:
    """``size`` train images (5% of that for val and test), deterministic for ``seed``
    whatever ``workers``; an interrupted generation is completed by the same call."""
    base = folder(root)
    return datasets.synthesis(
        base,
        NAME,
        size,
        seed,
        unit="image",
        params={"image_size": image_size, "classes": classes},
        write=lambda: _write_synthetic(base, size, seed, workers, image_size, classes),
    )


def _write_synthetic(
    base: Path, size: int, seed: int, workers: int, image_size: int, classes: int
) -> None:
    counts = split_sizes(size)
    with datasets.progress(NAME, sum(counts.values()), "image") as advance:
        for split, count in counts.items():
            datasets.map_chunks(
                _write_chunk,
                count,
                workers,
                lambda r, split=split: (base, split, r, seed, image_size, classes),
                on_result=advance,
                chunk=CHUNK,
            )


def download(root: Path) -> Path:
    """The legacy data: 100,000/5,000/5,000 images of 512x512 noise (it never came from the
    network)."""
    return synthesize(root, DEFAULT_SIZE, seed=0, workers=datasets.default_workers())


def image_folder(
    root: Path, split: str = "train", transform: Callable[[Any], Any] | None = None
) -> Any:
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

    return transforms.Compose(
        [
            transforms.RandomResizedCrop(crop_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )


def center_transform(size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> Any:
    """Resize the short side to ``size``, centre crop a square, then ``(x - mean) / std``.

    The generative models pick the range: mean=std=0.5 gives [-1, 1], std=1/255 gives
    [0, 255].
    """
    from torchvision import transforms

    return transforms.Compose(
        [
            transforms.Resize(size),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ]
    )
