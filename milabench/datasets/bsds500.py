"""BSDS500: the Berkeley segmentation images, used by the super-resolution test (reso).

Layout (as in the legacy BSR_bsds500.tgz): ``<root>/BSR/BSDS500/data/images/{train,val,test}/
<6 digits>.jpg``, RGB JPEGs of 481x321 or 321x481 (200 train, 100 val, 200 test). The real
archive also holds ground-truth segmentations and a Thumbs.db per image folder; the loader
reads ``*.jpg`` only. `synthesize` writes ``size`` train JPEGs of the real sizes (smooth
colour fields with shapes, edges and texture, so there is detail to up-sample) plus
``max(1, size // 10)`` val and test images.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

from milabench import datasets

NAME = "bsds500"
DEFAULT_SIZE = 200
URL = "http://www.eecs.berkeley.edu/Research/Projects/CS/vision/grouping/BSR/BSR_bsds500.tgz"
LONG, SHORT = 481, 321
# First file number per split: names are 6 digits like the real ones (e.g. 100075.jpg).
FIRST_NUMBER = {"train": 100_000, "val": 700_000, "test": 800_000}
MAX_SIZE = 100_000


def folder(root: Path) -> Path:
    """The dataset folder (holds the marker): ``<root>/BSR``."""
    return Path(root) / "BSR"


def images_folder(root: Path, split: str = "train") -> Path:
    return folder(root) / "BSDS500" / "data" / "images" / split


def image_files(root: Path, split: str = "train") -> list[Path]:
    """The split's JPEG files, sorted (other files, such as Thumbs.db, are skipped)."""
    return sorted(images_folder(root, split).glob("*.jpg"))


def draw_image(rng: Any) -> Any:
    """An RGB PIL image of 481x321 or 321x481: a smooth colour field, shapes and texture."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    width, height = (LONG, SHORT) if rng.random() < 0.5 else (SHORT, LONG)
    coarse = rng.integers(0, 256, size=(4, 6, 3), dtype=np.uint8)
    if width < height:
        coarse = coarse.transpose(1, 0, 2).copy()
    image = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(10, 30))):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        rx, ry = rng.uniform(5, SHORT / 4, size=2)
        x0, y0, x1, y1 = cx - rx, cy - ry, cx + rx, cy + ry
        colour = tuple(rng.integers(0, 256, size=3).tolist())
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape((x0, y0, x1, y1), fill=colour)
    image = image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 2.0))))
    texture = rng.normal(0, rng.uniform(2, 10), size=(height, width, 3))
    pixels = np.clip(np.asarray(image, dtype=np.float64) + texture, 0, 255)
    return Image.fromarray(pixels.round().astype(np.uint8))


def _write_chunk(task: tuple[Path, str, range, int]) -> int:
    import numpy as np

    root, split, indices, seed = task
    written = 0
    for i in indices:
        rng = np.random.default_rng(datasets.item_seed(seed, split, i))
        buf = io.BytesIO()
        draw_image(rng).save(buf, format="JPEG", quality=90)
        path = images_folder(root, split) / f"{FIRST_NUMBER[split] + i}.jpg"
        written += datasets.write_new(path, buf.getvalue())
    return written


def synthesize(root: Path, size: int = DEFAULT_SIZE, seed: int = 0, workers: int = 1) -> Path:
    """``size`` train JPEGs and ``max(1, size // 10)`` val and test; deterministic for ``seed``.

    Finished data already in the folder is kept (see :func:`datasets.ready`).
    """
    return datasets.synthesis(
        folder(root),
        NAME,
        size,
        seed,
        unit="image",
        max_size=MAX_SIZE,
        write=lambda: _write_synthetic(Path(root), size, seed, workers),
    )


def _write_synthetic(root: Path, size: int, seed: int, workers: int) -> None:
    for split, count in (
        ("train", size),
        ("val", max(1, size // 10)),
        ("test", max(1, size // 10)),
    ):
        datasets.map_chunks(
            _write_chunk, count, workers, lambda r, split=split: (root, split, r, seed)
        )


def download(root: Path) -> Path:
    """The real BSDS500 from Berkeley's BSR_bsds500.tgz, extracted under ``<root>/BSR``."""
    return datasets.real_data(folder(root), lambda: _fetch(Path(root)))


def _fetch(root: Path) -> dict[str, int]:
    archive = datasets.fetch(URL, root / "BSR_bsds500.tgz")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")  # the archive's top folder is BSR/
    return {"size": len(image_files(root, "train"))}


class SuperResolutionSet:
    """(input, target) pairs from one split: Y channel crops and their down-scaled copies.

    target: the centre ``crop`` x ``crop`` of the luminance (Y of YCbCr); input: the same crop
    resized down by ``factor`` (bilinear: the legacy's torchvision Resize); both 1xHxW float
    tensors in [0, 1].
    """

    def __init__(self, files: list[Path], crop: int, factor: int):
        # Imported by the process that makes the set, so DataLoader workers forked from it
        # (anew at every epoch in the reso test, as the legacy's) find them loaded: the
        # legacy test imported torchvision's transforms before its workers were forked.
        import PIL.Image  # noqa: F401
        import torchvision.transforms.functional  # noqa: F401

        self.files = files
        self.crop = crop
        self.factor = factor

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        from PIL import Image
        from torchvision.transforms.functional import to_tensor

        with Image.open(self.files[index]) as image:
            luma = image.convert("YCbCr").getchannel("Y")
        left = (luma.width - self.crop) // 2
        top = (luma.height - self.crop) // 2
        target = luma.crop((left, top, left + self.crop, top + self.crop))
        small = self.crop // self.factor
        source = target.resize((small, small), Image.Resampling.BILINEAR)
        return to_tensor(source), to_tensor(target)


def reso_train_set(root: Path, crop_size: int = 256, upscale_factor: int = 2) -> Any:
    """The train split as super-resolution pairs (crop made divisible by the factor)."""
    datasets.require(folder(root), NAME, Path(root))
    if upscale_factor < 1 or crop_size < upscale_factor:
        raise ValueError(
            f"crop size {crop_size} and upscale factor {upscale_factor}: need "
            "factor >= 1 and crop size >= factor"
        )
    crop = crop_size - crop_size % upscale_factor
    return SuperResolutionSet(image_files(root, "train"), crop, upscale_factor)
