"""MNIST: the four idx files under MNIST/raw, read by torchvision.datasets.MNIST.

Layout (what ``torchvision.datasets.MNIST(root, download=False)`` reads; it needs no
``processed`` folder): ``<root>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``.
`download` fetches the four gzipped files from torchvision's mirror and unpacks them;
`synthesize` writes valid idx files of digit-like images (seven-segment strokes with random
position, size, slant and thickness, plus noise): ``size`` train and ``size // 6`` test images
(the real 60,000 / 10,000 ratio).
"""

from __future__ import annotations

import gzip
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from milabench import datasets

NAME = "mnist"
DEFAULT_SIZE = 60_000
SIDE = 28
IMAGES_MAGIC = 2051  # idx3: unsigned bytes, 3 dimensions
LABELS_MAGIC = 2049  # idx1: unsigned bytes, 1 dimension
MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"
RESOURCES = {  # file -> md5 of the .gz (torchvision's checksums)
    "train-images-idx3-ubyte": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte": "ec29112dd5afa0611ce80d1b7f02629c",
}
SPLITS = {"train": "train", "test": "t10k"}  # split -> file prefix

# Seven-segment strokes in a unit box (x right, y down): a top, b top-right, c bottom-right,
# d bottom, e bottom-left, f top-left, g middle.
SEGMENTS = {
    "a": ((0, 0), (1, 0)),
    "b": ((1, 0), (1, 0.5)),
    "c": ((1, 0.5), (1, 1)),
    "d": ((0, 1), (1, 1)),
    "e": ((0, 0.5), (0, 1)),
    "f": ((0, 0), (0, 0.5)),
    "g": ((0, 0.5), (1, 0.5)),
}
DIGITS = ("abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc", "abcdefg", "abcdfg")


def folder(root: Path) -> Path:
    return Path(root) / "MNIST"


def raw_folder(root: Path) -> Path:
    return folder(root) / "raw"


def idx_images(images: Any) -> bytes:
    """An idx3-ubyte file: magic 2051, count, rows, cols (big-endian int32), then pixels."""
    count, rows, cols = images.shape
    return struct.pack(">4i", IMAGES_MAGIC, count, rows, cols) + images.tobytes()


def idx_labels(labels: Any) -> bytes:
    """An idx1-ubyte file: magic 2049, count (big-endian int32), then one byte per label."""
    return struct.pack(">2i", LABELS_MAGIC, len(labels)) + labels.tobytes()


def draw_digit(rng: Any, label: int) -> Any:
    """A 28x28 uint8 image of ``label`` drawn with seven-segment strokes and noise."""
    import numpy as np

    height = rng.uniform(14, 20)
    width = height * rng.uniform(0.45, 0.65)
    slant = rng.uniform(-0.25, 0.25)
    x0 = (SIDE - width) / 2 + rng.uniform(-2, 2)
    y0 = (SIDE - height) / 2 + rng.uniform(-2, 2)
    thickness = rng.uniform(1.0, 2.2)
    ends = np.array([SEGMENTS[s] for s in DIGITS[label]], dtype=np.float64)  # (n, 2, 2)
    ends = ends + rng.normal(0, 0.04, size=ends.shape)  # hand-drawn wobble
    xs = x0 + ends[..., 0] * width + (1 - ends[..., 1]) * height * slant
    ys = y0 + ends[..., 1] * height
    p0 = np.stack([xs[:, 0], ys[:, 0]], -1)[:, None, :]  # (n, 1, 2)
    p1 = np.stack([xs[:, 1], ys[:, 1]], -1)[:, None, :]
    grid = np.stack(np.meshgrid(np.arange(SIDE), np.arange(SIDE)), -1).reshape(1, -1, 2)
    seg = p1 - p0
    t = np.clip(((grid - p0) * seg).sum(-1) / np.maximum((seg * seg).sum(-1), 1e-9), 0, 1)
    dist = np.linalg.norm(grid - (p0 + t[..., None] * seg), axis=-1).min(0)
    ink = np.clip(thickness + 0.5 - dist, 0, 1)  # anti-aliased stroke edge
    ink = ink + rng.normal(0, 0.05, size=ink.shape)
    return (np.clip(ink, 0, 1) * 255).round().astype(np.uint8).reshape(SIDE, SIDE)


def _draw_chunk(task: tuple[str, range, int]) -> tuple[bytes, bytes]:
    import numpy as np

    split, indices, seed = task
    images = np.empty((len(indices), SIDE, SIDE), dtype=np.uint8)
    labels = np.empty(len(indices), dtype=np.uint8)
    for j, i in enumerate(indices):
        rng = np.random.default_rng(datasets.item_seed(seed, split, i))
        labels[j] = rng.integers(10)
        images[j] = draw_digit(rng, int(labels[j]))
    return images.tobytes(), labels.tobytes()


def synthesize(root: Path, size: int = DEFAULT_SIZE, seed: int = 0, workers: int = 1) -> Path:
    """``size`` train and ``size // 6`` (at least 1) test images; deterministic for ``seed``.

    Finished data already in the folder is kept (see :func:`datasets.ready`).
    """
    return datasets.synthesis(
        folder(root),
        NAME,
        size,
        seed,
        unit="image",
        write=lambda: _write_synthetic(root, size, seed, workers),
    )


def _write_synthetic(root: Path, size: int, seed: int, workers: int) -> None:
    import numpy as np

    raw = raw_folder(root)
    for split, count in (("train", size), ("test", max(1, size // 6))):
        parts = datasets.map_chunks(
            _draw_chunk, count, workers, lambda r, split=split: (split, r, seed)
        )
        images = np.frombuffer(b"".join(p[0] for p in parts), np.uint8).reshape(-1, SIDE, SIDE)
        labels = np.frombuffer(b"".join(p[1] for p in parts), np.uint8)
        prefix = SPLITS[split]
        # Nothing finished is here (no marker): files left by an interrupted run are stale,
        # and each file has one writer (this process), so replacing them is safe.
        datasets.write_new(raw / f"{prefix}-images-idx3-ubyte", idx_images(images), replace=True)
        datasets.write_new(raw / f"{prefix}-labels-idx1-ubyte", idx_labels(labels), replace=True)


def download(root: Path) -> Path:
    """The real MNIST (60,000 train / 10,000 test) from torchvision's S3 mirror."""
    return datasets.real_data(folder(root), lambda: _fetch(raw_folder(root)))


def _fetch(raw: Path) -> dict[str, int]:
    for name, md5 in RESOURCES.items():
        archive = datasets.fetch(MIRROR + name + ".gz", raw / (name + ".gz"), md5=md5)
        tmp = raw / f".{name}.unpacking"
        with gzip.open(archive, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
        tmp.replace(raw / name)
    return {"size": 60_000}


def train_set(root: Path, transform: Callable[[Any], Any] | None = None) -> Any:
    """torchvision's MNIST train split (fails with the command to run if data is missing)."""
    from torchvision.datasets import MNIST

    datasets.require(folder(root), NAME, Path(root))
    return MNIST(str(root), train=True, transform=transform, download=False)
