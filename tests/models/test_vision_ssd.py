"""The coco dataset (synthetic COCO 2017 layout, JSON loader) and the ssd model on CPU.

Legacy counterpart: milarun/models/ssd/ (train.py, ssd300.py, base_model.py, utils.py: MLPerf
SSD v0.6, SSD300-ResNet34) and milarun/datasets/coco/ in mila-iqia/milabench at tag
mila-ao-2020-2. Same network, default boxes, encoder, augmentation, loss, optimiser and 4
loader workers. Differences left: random weights (legacy: an ImageNet-pretrained backbone
downloaded at start; the same computation), no per-step ``loss.item()`` (the legacy step
read it twice, a device sync), crowd and degenerate boxes dropped at load (legacy kept
them; a zero-width box made an infinite loss), the crop and flip draw from torch's
generator (legacy: Python's ``random``), pinned loader memory on GPUs and cudnn.benchmark
only on CUDA.

The synthesizer's files are read back by the loader; the unit checks build the network and
its targets without training; the model trains for real through ``milarun run`` on a tiny
synthetic set (257 px, the smallest input, batch 2: a few seconds per step on one core).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from milabench import datasets
from milabench.datasets import coco
from modelrun import assert_rejected, run_trained, run_without_data

TRAIN = 12
SEED = 3
RUN_ARGS = ["--batch-size", "2", "--image-size", "257", "--workers", "1", "--min-slices", "6"]


# Every test here on one worker, in a row: the data below is synthesized once.
pytestmark = pytest.mark.xdist_group(name="vision_ssd")


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
            f"{im['id']:012d}.jpg" for im in doc["images"]
        )
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
        expected = torch.tensor(
            [
                [x * sx, y * sy, (x + w) * sx, (y + h) * sy]
                for x, y, w, h in (a["bbox"] for a in anns)
            ]
        )
        assert torch.allclose(target["boxes"], expected, atol=1e-3)
        assert target["boxes"].dtype == torch.float32
        assert target["labels"].dtype == torch.int64
        assert target["labels"].tolist() == [contiguous[a["category_id"]] for a in anns]
    # The pixels inside a box are its rectangle's colour, not the background.
    image, target = data[0]
    x1, y1, x2, y2 = target["boxes"][-1].round().int().tolist()  # drawn last: on top
    inside = image[:, y1 + 2 : y2 - 2, x1 + 2 : x2 - 2]
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
        item[0] for item in data.items
    }


# -- model -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def network():
    import torch

    from milabench.models import ssd

    torch.manual_seed(0)
    return ssd.SSD300().eval()


def test_six_heads_with_4_6_6_6_4_4_boxes_and_8732_anchors(network):
    import torch

    from milabench import ssd_parts
    from milabench.models import ssd

    assert ssd_parts.boxes_per_cell() == [4, 6, 6, 6, 4, 4]
    assert [h.out_channels for h in network.loc] == [16, 24, 24, 24, 16, 16]
    assert [h.out_channels for h in network.conf] == [n * 81 for n in (4, 6, 6, 6, 4, 4)]
    assert ssd.feature_sizes(300) == [38, 19, 10, 5, 3, 1]
    anchors = ssd.anchors(300)
    assert anchors.shape == (8732, 4) and float(anchors.min()) >= 0 and float(anchors.max()) <= 1
    # The first map's first cell: a 21 px square centred 4 px (half a stride) in.
    assert torch.allclose(anchors[0], torch.tensor([4 / 300, 4 / 300, 21 / 300, 21 / 300]))
    assert ssd.MIN_IMAGE_SIZE == 257 and ssd.feature_sizes(256)[-1] == 0


def test_first_map_is_38x38x256_and_outputs_cover_every_anchor(network):
    import torch

    from milabench.models import ssd

    backbone = network.backbone[6][0]  # layer3's first block: no longer strided
    assert backbone.conv1.stride == (1, 1) and backbone.downsample[0].stride == (1, 1)
    maps = []  # what the heads read, caught in one forward pass
    hooks = [
        m.register_forward_hook(lambda m, i, out: maps.append(tuple(out.shape[1:])))
        for m in (network.backbone, *network.extra)
    ]
    with torch.no_grad():
        ploc, plabel = network(torch.zeros(1, 3, 300, 300))
    for hook in hooks:
        hook.remove()
    assert maps == [
        (256, 38, 38),
        (512, 19, 19),
        (512, 10, 10),
        (256, 5, 5),
        (256, 3, 3),
        (256, 1, 1),
    ]
    assert ploc.shape == (1, 4, 8732) and plabel.shape == (1, 81, 8732)
    assert len(ssd.anchors(257)) == 6766  # fewer anchors on smaller maps (33, 17, 9, ...)


def test_encoder_round_trip():
    import torch

    from milabench import ssd_parts
    from milabench.models import ssd

    anchors = ssd.anchors(300)
    encoder = ssd_parts.BoxEncoder(anchors)
    boxes = torch.tensor([[0.20, 0.30, 0.60, 0.80], [0.70, 0.70, 0.72, 0.73]])
    xywh, labels = encoder.encode(boxes, torch.tensor([5, 9]))
    assert xywh.shape == (8732, 4) and labels.shape == (8732,)
    big, tiny = labels == 5, labels == 9
    assert int(big.sum()) > 1  # every anchor above IoU 0.5
    # The tiny box overlaps no anchor by 0.5 but keeps its best one.
    assert int(tiny.sum()) == 1
    offsets = ssd_parts.xywh_to_offsets(xywh.t(), anchors.t())
    back = encoder.decode(offsets)
    assert torch.allclose(back[big], boxes[0].expand(int(big.sum()), 4), atol=1e-5)
    assert torch.allclose(back[tiny], boxes[1:], atol=1e-5)
    background = labels == 0
    assert float(offsets.t()[background].abs().max()) < 1e-5  # unmatched: zero offsets


def test_hard_negative_mining_keeps_3_negatives_per_positive():
    import torch

    from milabench import ssd_parts

    torch.manual_seed(0)
    losses = torch.rand(3, 50)
    labels = torch.zeros(3, 50, dtype=torch.int64)
    labels[0, :2] = 4
    labels[1, 10:15] = 7
    positive = labels > 0
    chosen = ssd_parts.hard_negatives(losses, positive)
    assert chosen.sum(1).tolist() == [6, 15, 0]
    assert not bool((chosen & positive).any())
    for row in range(2):  # the negatives with the highest losses
        negatives = losses[row][~positive[row]]
        kept = losses[row][chosen[row]]
        assert sorted(kept.tolist()) == sorted(negatives.topk(len(kept)).values.tolist())
    # The loss counts positives and chosen negatives only; an image without objects adds 0.
    criterion = ssd_parts.MultiBoxLoss(torch.rand(50, 4) * 0.5 + 0.25)
    plabel = torch.randn(3, 81, 50)
    ploc = torch.zeros(3, 4, 50)
    gloc = criterion.anchors.expand(3, 4, 50)  # the anchors themselves: zero offsets
    ce = torch.nn.functional.cross_entropy(plabel, labels, reduction="none")
    mined = ssd_parts.hard_negatives(ce, positive)
    expected = (
        sum((ce[r] * (positive[r] | mined[r])).sum() / positive[r].sum() for r in range(2)) / 3
    )
    assert torch.allclose(criterion(ploc, plabel, gloc, labels), expected)


def test_training_examples_are_cropped_and_encoded_in_the_loader(dataroot):
    import torch

    from milabench import ssd_parts
    from milabench.models import ssd

    encoder = ssd_parts.BoxEncoder(ssd.anchors(300))
    data = coco.transformed_train_set(dataroot, ssd_parts.TrainTransform(encoder, 300))
    torch.manual_seed(1)
    for index in range(4):
        image, boxes, labels = data[index]
        assert image.shape == (3, 300, 300) and float(image.min()) < 0  # normalised
        assert boxes.shape == (8732, 4) and labels.shape == (8732,)
        assert int((labels > 0).sum()) >= 1 and int(labels.max()) <= 80
    crop = ssd_parts.SSDCrop()
    from PIL import Image

    picture = Image.new("RGB", (400, 300))
    boxes = torch.tensor([[0.1, 0.1, 0.4, 0.5], [0.5, 0.2, 0.9, 0.9]])
    sizes = set()
    for _ in range(40):
        out, kept, labels = crop(picture, boxes.clone(), torch.tensor([1, 2]))
        assert len(kept) == len(labels) >= 1
        assert float(kept.min()) >= 0 and float(kept.max()) <= 1
        sizes.add(out.size)
    assert (400, 300) in sizes and len(sizes) > 1  # kept whole sometimes, cropped others


@pytest.mark.slow
def test_ssd_trains_on_synthetic_coco(dataroot, tmp_path):
    result = run_trained("ssd", dataroot, tmp_path, RUN_ARGS)
    assert result["timings"]["train"]["count"] % 2 == 0  # whole batches of 2
    assert result["call"]["arguments"]["image_size"] == 257


@pytest.mark.slow  # its CLI path: test_missing_data.py says which fast test has it
def test_ssd_without_data_fails_at_once(tmp_path):
    run_without_data("ssd", tmp_path, *RUN_ARGS)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--image-size", "128"], "--image-size 128"),
        (["--batch-size", "0"], "batch-size"),
        (["--workers", "-1"], "--workers -1"),
    ],
)
def test_ssd_bad_arguments(tmp_path, argv, message):
    assert_rejected("ssd", argv, message, tmp_path)
