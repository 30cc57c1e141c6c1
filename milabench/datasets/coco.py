"""COCO 2017 detection: coco/{train2017,val2017}/<12-digit id>.jpg + instances JSON files.

`download` fetches the real archives from images.cocodataset.org (the legacy ssd data);
`synthesize` writes the same layout offline: JPEGs of about 640x480 with 1-6 coloured
rectangles each, described as boxes in ``annotations/instances_{train,val}2017.json``
(the standard COCO instances format, with the 80 real category ids and names).

The loader reads the JSON with the ``json`` module (no pycocotools) and yields
(image, target) pairs in the torchvision detection convention.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

from milabench import datasets

NAME = "coco"
DEFAULT_SIZE = 2500  # one pass of the standard ssd run (--max-count 2500)
URLS = (
    "http://images.cocodataset.org/zips/train2017.zip",
    "http://images.cocodataset.org/zips/val2017.zip",
    "http://images.cocodataset.org/annotations/annotations_trainval2017.zip",
)
SPLITS = ("train2017", "val2017")

# The 80 COCO categories: id (1..90 with gaps), name, supercategory.
_SUPER = {
    "person": "person",
    "vehicle": "bicycle car motorcycle airplane bus train truck boat",
    "outdoor": "traffic_light fire_hydrant stop_sign parking_meter bench",
    "animal": "bird cat dog horse sheep cow elephant bear zebra giraffe",
    "accessory": "backpack umbrella handbag tie suitcase",
    "sports": "frisbee skis snowboard sports_ball kite baseball_bat baseball_glove "
    "skateboard surfboard tennis_racket",
    "kitchen": "bottle wine_glass cup fork knife spoon bowl",
    "food": "banana apple sandwich orange broccoli carrot hot_dog pizza donut cake",
    "furniture": "chair couch potted_plant bed dining_table toilet",
    "electronic": "tv laptop mouse remote keyboard cell_phone",
    "appliance": "microwave oven toaster sink refrigerator",
    "indoor": "book clock vase scissors teddy_bear hair_drier toothbrush",
}
_MISSING_IDS = {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}
_NAMES = [n.replace("_", " ") for words in _SUPER.values() for n in words.split()]
_SUPER_OF = {n.replace("_", " "): s for s, words in _SUPER.items() for n in words.split()}
CATEGORY_IDS = [i for i in range(1, 91) if i not in _MISSING_IDS]
CATEGORIES = [
    {"id": i, "name": n, "supercategory": _SUPER_OF[n]}
    for i, n in zip(CATEGORY_IDS, _NAMES, strict=True)
]


def folder(root: Path) -> Path:
    return Path(root) / "coco"


def annotation_file(base: Path, split: str) -> Path:
    return base / "annotations" / f"instances_{split}.json"


# -- synthesis ---------------------------------------------------------------------
def _draw(seed: int, split: str, image_id: int) -> tuple[bytes, dict, list[dict]]:
    """One synthetic picture: JPEG bytes, its COCO image record, its annotations."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(datasets.item_seed(seed, split, image_id))
    width, height = int(rng.integers(560, 721)), int(rng.integers(400, 561))
    if rng.random() < 0.25:  # some portrait pictures, as in COCO
        width, height = height, width
    # A smooth two-colour gradient with a little noise as the background.
    top, bottom = rng.integers(0, 256, size=(2, 3))
    ramp = np.linspace(0.0, 1.0, height)[:, None, None]
    pixels = (top * (1 - ramp) + bottom * ramp) + rng.normal(0, 12, size=(height, width, 3))
    annotations = []
    for _ in range(int(rng.integers(1, 7))):
        w = int(rng.integers(16, max(17, width * 3 // 5)))
        h = int(rng.integers(16, max(17, height * 3 // 5)))
        x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
        category = CATEGORY_IDS[int(rng.integers(len(CATEGORY_IDS)))]
        colour = np.array([(category * 37) % 256, (category * 91) % 256, (category * 53) % 256])
        pixels[y : y + h, x : x + w] = colour + rng.normal(0, 8, size=(h, w, 3))
        annotations.append(
            {
                "image_id": image_id,
                "category_id": category,
                "bbox": [x, y, w, h],
                "area": float(w * h),
                "iscrowd": 0,
                "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]],
            }
        )
    buf = io.BytesIO()
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=85)
    record = {
        "id": image_id,
        "file_name": f"{image_id:012d}.jpg",
        "width": width,
        "height": height,
        "license": 1,
    }
    return buf.getvalue(), record, annotations


def _write_chunk(task: tuple[Path, str, range, int]) -> list[tuple[dict, list[dict]]]:
    base, split, ids, seed = task
    out = []
    for image_id in ids:
        data, record, annotations = _draw(seed, split, image_id)
        datasets.write_new(base / split / record["file_name"], data)
        out.append((record, annotations))
    return out


def synthesize(root: Path, size: int = DEFAULT_SIZE, seed: int = 0, workers: int = 1) -> Path:
    """``size`` train images and ``size // 10`` (at least 1) val images, with annotations.

    Image ids are 1..size for train2017 and follow on for val2017 (ids are unique across
    splits, as in COCO). Deterministic for ``seed``.
    """
    base = folder(root)
    return datasets.synthesis(
        base,
        NAME,
        size,
        seed,
        unit="image",
        write=lambda: _write_synthetic(base, size, seed, workers),
    )


def _write_synthetic(base: Path, size: int, seed: int, workers: int) -> None:
    first = {"train2017": 1, "val2017": size + 1}
    counts = {"train2017": size, "val2017": max(1, size // 10)}
    for split in SPLITS:
        start = first[split]
        drawn = datasets.flatten(
            datasets.map_chunks(
                _write_chunk,
                counts[split],
                workers,
                lambda r, split=split, start=start: (
                    base,
                    split,
                    range(start + r.start, start + r.stop),
                    seed,
                ),
            )
        )
        annotations = [a for _, anns in drawn for a in anns]
        for number, annotation in enumerate(annotations, 1):
            annotation["id"] = number
        document = {
            "info": {"description": "milarun synthetic COCO 2017", "version": "1.0", "year": 2017},
            "licenses": [{"id": 1, "name": "synthetic", "url": ""}],
            "images": [record for record, _ in drawn],
            "annotations": annotations,
            "categories": CATEGORIES,
        }
        # Written by this process alone, after the images it describes.
        datasets.write_new(
            annotation_file(base, split), json.dumps(document).encode(), replace=True
        )


def download(root: Path) -> Path:
    """The real COCO 2017 train/val images and instances annotations (about 19 GB)."""
    base = folder(root)
    return datasets.real_data(base, lambda: _fetch(base))


def _fetch(base: Path) -> None:
    for url in URLS:
        archive = datasets.fetch(url, base / "downloads" / url.rsplit("/", 1)[1])
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(base)  # train2017/, val2017/ or annotations/
        archive.unlink()


# -- loading -----------------------------------------------------------------------
class CocoDetection:
    """COCO instances as (image, target) pairs for torchvision detection models.

    image: float tensor 3 x image_size x image_size in [0, 1] (the detection models
    normalise inside, in their own transform); target: {"boxes": FloatTensor[N, 4] as
    x1, y1, x2, y2 pixels of the resized image, "labels": Int64Tensor[N] in 1..80}.
    Crowd and degenerate boxes are dropped; images left without a box are skipped.
    ``flip`` mirrors half of the images at random (the usual training augmentation).
    ``transform``, when given, replaces the resize and flip: it is called with the RGB PIL
    picture, its boxes as x1, y1, x2, y2 fractions of the picture and its labels, and
    returns the item (the ssd test's MLPerf augmentation and target encoding).
    """

    def __init__(
        self,
        base: Path,
        split: str,
        image_size: int = 300,
        flip: bool = True,
        transform: Any = None,
    ):
        import numpy as np

        document = json.loads(annotation_file(base, split).read_text())
        contiguous = {
            c["id"]: i
            for i, c in enumerate(sorted(document["categories"], key=lambda c: c["id"]), 1)
        }
        boxes: dict[int, list[list[float]]] = {}
        labels: dict[int, list[int]] = {}
        for a in document["annotations"]:
            x, y, w, h = a["bbox"]
            if a.get("iscrowd", 0) or w <= 1 or h <= 1:
                continue
            boxes.setdefault(a["image_id"], []).append([x, y, x + w, y + h])
            labels.setdefault(a["image_id"], []).append(contiguous[a["category_id"]])
        self.folder = base / split
        self.image_size = image_size
        self.flip = flip
        self.transform = transform
        # Compact per-image records (the parsed JSON is dropped: workers share these).
        self.items = [
            (
                im["file_name"],
                np.array([im["width"], im["height"]] * 2, dtype=np.float32),
                np.array(boxes[im["id"]], dtype=np.float32),
                np.array(labels[im["id"]], dtype=np.int64),
            )
            for im in sorted(document["images"], key=lambda im: im["id"])
            if im["id"] in boxes
        ]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Any, dict[str, Any]]:
        import numpy as np
        import torch
        from PIL import Image

        file_name, wh, xyxy, labels = self.items[index]
        size = self.image_size
        with Image.open(self.folder / file_name) as picture:  # some COCO images are grey
            picture = picture.convert("RGB")
        boxes = torch.minimum(torch.from_numpy(xyxy).clamp(min=0), torch.from_numpy(wh))
        if self.transform is not None:
            return self.transform(picture, boxes / torch.from_numpy(wh), torch.from_numpy(labels))
        picture = picture.resize((size, size), Image.Resampling.BILINEAR)
        image = torch.from_numpy(np.array(picture)).permute(2, 0, 1).contiguous()
        # Boxes from the annotation's image size to the square output.
        boxes = boxes * (size / torch.from_numpy(wh))
        if self.flip and torch.rand(()) < 0.5:
            image = image.flip(-1)
            boxes = torch.stack(
                [size - boxes[:, 2], boxes[:, 1], size - boxes[:, 0], boxes[:, 3]], 1
            )
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        target = {"boxes": boxes[keep], "labels": torch.from_numpy(labels)[keep]}
        return image.float().div_(255), target


def detection_train_set(root: Path, image_size: int = 300) -> CocoDetection:
    """The train2017 split, resized to ``image_size`` squares, random horizontal flips."""
    base = datasets.require(folder(root), NAME, Path(root))
    return CocoDetection(base, "train2017", image_size, flip=True)


def transformed_train_set(root: Path, transform: Any) -> CocoDetection:
    """The train2017 split, each item made by ``transform`` (see CocoDetection)."""
    base = datasets.require(folder(root), NAME, Path(root))
    return CocoDetection(base, "train2017", transform=transform)


def detection_val_set(root: Path, image_size: int = 300) -> CocoDetection:
    """The val2017 split, resized to ``image_size`` squares, no augmentation."""
    base = datasets.require(folder(root), NAME, Path(root))
    return CocoDetection(base, "val2017", image_size, flip=False)


def collate(batch: list[tuple[Any, dict[str, Any]]]) -> tuple[Any, list[dict[str, Any]]]:
    """DataLoader collate: (images stacked into one B x 3 x S x S tensor, list of targets).

    The images all have the same size, so one tensor moves to the device in one copy;
    the detection models accept it wherever they take a list of images.
    """
    import torch

    images, targets = zip(*batch, strict=True)
    return torch.stack(images), list(targets)
