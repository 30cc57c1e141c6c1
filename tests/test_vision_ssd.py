"""The coco dataset (synthetic COCO 2017 layout, JSON loader) and the ssd model on CPU.

The synthesizer's files are read back by the loader; the model trains for real through
``milarun run`` on a tiny synthetic set (ssd300_vgg16 at its smallest input size, 268 px,
batch 2: about 2-5 s per step on one core, so 2 steps give >= 8 slices of 0.5 s).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from modelrun import assert_rejected, run_trained, run_without_data

from milabench import datasets
from milabench.datasets import coco

TRAIN = 12
SEED = 3
RUN_ARGS = ["--batch-size", "2", "--image-size", "268", "--workers", "1",
            "--min-slices", "6"]


@pytest.fixture(scope="module")
def dataroot(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cocodata")
    coco.synthesize(root, TRAIN, seed=SEED, workers=2)
    return root


def instances(root: Path, split: str) -> dict:
    return json.loads(coco.annotation_file(coco.folder(root), split).read_text())


# -- dataset -----------------------------------------------------------------------
def test_layout_and_annotation_format(dataroot):
    base = coco.folder(dataroot)
    assert datasets.is_synthetic(base) is True
    train, val = instances(dataroot, "train2017"), instances(dataroot, "val2017")
    assert len(train["images"]) == TRAIN and len(val["images"]) == 1
    for split, doc in (("train2017", train), ("val2017", val)):
        assert sorted(p.name for p in (base / split).iterdir()) == sorted(
            f"{im['id']:012d}.jpg" for im in doc["images"])
        assert {"info", "licenses", "images", "annotations", "categories"} <= set(doc)
        assert [c["id"] for c in doc["categories"]] == coco.CATEGORY_IDS
        per_image = {}
        for a in doc["annotations"]:
            per_image[a["image_id"]] = per_image.get(a["image_id"], 0) + 1
            image = next(im for im in doc["images"] if im["id"] == a["image_id"])
            x, y, w, h = a["bbox"]
            assert 0 <= x and 0 <= y and x + w <= image["width"] and y + h <= image["height"]
            assert a["area"] == w * h and a["iscrowd"] == 0 and a["segmentation"]
            assert a["category_id"] in coco.CATEGORY_IDS
        assert sorted(per_image) == sorted(im["id"] for im in doc["images"])
        assert all(1 <= n <= 6 for n in per_image.values())
        assert len({a["id"] for a in doc["annotations"]}) == len(doc["annotations"])
    assert not {im["id"] for im in train["images"]} & {im["id"] for im in val["images"]}
    names = {c["id"]: c["name"] for c in train["categories"]}
    assert len(names) == 80 and max(names) == 90
    assert (names[1], names[13], names[90]) == ("person", "stop sign", "toothbrush")
    with open(base / "train2017" / train["images"][0]["file_name"], "rb") as f:
        assert f.read(3) == b"\xff\xd8\xff"  # JPEG
    from PIL import Image

    image = Image.open(base / "train2017" / train["images"][0]["file_name"])
    assert image.size == (train["images"][0]["width"], train["images"][0]["height"])
    assert 400 <= min(image.size) and max(image.size) <= 720


def test_loader_reads_back_every_box(dataroot):
    import torch

    doc = instances(dataroot, "train2017")
    contiguous = {cid: i for i, cid in enumerate(coco.CATEGORY_IDS, 1)}
    data = coco.CocoDetection(coco.folder(dataroot), "train2017", 300, flip=False)
    assert len(data) == TRAIN
    for index, record in enumerate(sorted(doc["images"], key=lambda im: im["id"])):
        image, target = data[index]
        assert image.shape == (3, 300, 300) and image.dtype == torch.float32
        assert 0.0 <= float(image.min()) and float(image.max()) <= 1.0
        anns = [a for a in doc["annotations"] if a["image_id"] == record["id"]]
        sx, sy = 300 / record["width"], 300 / record["height"]
        expected = torch.tensor([[x * sx, y * sy, (x + w) * sx, (y + h) * sy]
                                 for x, y, w, h in (a["bbox"] for a in anns)])
        assert torch.allclose(target["boxes"], expected, atol=1e-3)
        assert target["boxes"].dtype == torch.float32
        assert target["labels"].dtype == torch.int64
        assert target["labels"].tolist() == [contiguous[a["category_id"]] for a in anns]
    # The pixels inside a box are its rectangle's colour, not the background.
    image, target = data[0]
    x1, y1, x2, y2 = target["boxes"][-1].round().int().tolist()  # drawn last: on top
    inside = image[:, y1 + 2:y2 - 2, x1 + 2:x2 - 2]
    assert float(inside.std(dim=(1, 2)).max()) < 0.1


def test_train_set_flips_and_collates(dataroot):
    import torch

    train = coco.detection_train_set(dataroot, image_size=64)
    assert len(train) == TRAIN
    torch.manual_seed(0)
    for index in range(len(train)):
        image, target = train[index]
        assert image.shape == (3, 64, 64)
        boxes = target["boxes"]
        assert bool((boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all())
        assert float(boxes.min()) >= 0 and float(boxes.max()) <= 64
        assert 1 <= int(target["labels"].min()) and int(target["labels"].max()) <= 80
    loader = torch.utils.data.DataLoader(train, batch_size=4, collate_fn=coco.collate)
    images, targets = next(iter(loader))
    assert images.shape == (4, 3, 64, 64)
    assert len(targets) == 4 and set(targets[0]) == {"boxes", "labels"}
    assert len(coco.detection_val_set(dataroot, 64)) == 1


def test_skips_images_without_usable_boxes(dataroot, tmp_path):
    """Crowd regions and degenerate boxes are dropped; an image left without any is skipped."""
    base = coco.folder(tmp_path)
    shutil.copytree(coco.folder(dataroot), base)
    path = coco.annotation_file(base, "train2017")
    doc = json.loads(path.read_text())
    first, second = doc["images"][0]["id"], doc["images"][1]["id"]
    for a in doc["annotations"]:
        if a["image_id"] == first:
            a["iscrowd"] = 1
        elif a["image_id"] == second:
            a["bbox"][2] = 0.5
    path.write_text(json.dumps(doc))
    data = coco.CocoDetection(base, "train2017", 300)
    assert len(data) == TRAIN - 2
    assert not {doc["images"][0]["file_name"], doc["images"][1]["file_name"]} & {
        item[0] for item in data.items}


# -- model -------------------------------------------------------------------------
def test_ssd_trains_on_synthetic_coco(dataroot, tmp_path):
    result = run_trained("ssd", dataroot, tmp_path, RUN_ARGS)
    assert result["timings"]["train"]["count"] % 2 == 0  # whole batches of 2
    assert result["call"]["arguments"]["image_size"] == 268


def test_ssd_without_data_fails_at_once(tmp_path):
    run_without_data("ssd", tmp_path, *RUN_ARGS)


@pytest.mark.parametrize("argv, message", [
    (["--image-size", "128"], "--image-size 128"),
    (["--batch-size", "0"], "batch-size"),
    (["--workers", "-1"], "--workers -1"),
])
def test_ssd_bad_arguments(tmp_path, argv, message):
    assert_rejected("ssd", argv, message, tmp_path)
