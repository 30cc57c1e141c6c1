"""MLPerf SSD v0.6 (SSD300-ResNet34) around the network: the default boxes, the box encoder
that makes each image's training targets on the CPU, the training augmentation and the
loss with hard-negative mining. The network and its training step are
``milabench/models/ssd.py``.

Boxes are fractions of the image: ``ltrb`` (left, top, right, bottom) or ``xywh`` (centre,
width, height). Anchor ``k`` of a feature map of side ``f`` with ``n`` boxes per cell is
ordered by box shape first, then row, then column, which is the order the heads' outputs
have once viewed as ``(batch, 4 or classes, n * f * f)``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

BASE_SIZE = 300
# Default-box sizes in pixels at 300 px: map k uses SCALES[k] and SCALES[k + 1].
SCALES = (21, 45, 99, 153, 207, 261, 315)
# Aspect ratios besides 1 per map; each adds a box and its transpose.
ASPECT_RATIOS = ((2,), (2, 3), (2, 3), (2, 3), (2,), (2,))
# Pixel strides of the first four maps; the last two (3x3, 1x1) spread over the whole image.
STRIDES = (8, 16, 32, 64)
# Regression targets are offsets divided by these variances (MLPerf: 0.1 and 0.2).
SCALE_XY, SCALE_WH = 0.1, 0.2
IOU_THRESHOLD = 0.5
NEGATIVES_PER_POSITIVE = 3
MEAN = (0.485, 0.456, 0.406)  # ImageNet statistics, applied in the data pipeline
STD = (0.229, 0.224, 0.225)


def boxes_per_cell() -> list[int]:
    """Default boxes per location of each map: 2 squares + 2 per extra ratio (4,6,6,6,4,4)."""
    return [2 + 2 * len(ratios) for ratios in ASPECT_RATIOS]


def default_boxes(image_size: int, feature_sizes: list[int]) -> torch.Tensor:
    """The anchors (A x 4, xywh, clamped to [0, 1]); 8732 at 300 px (38,19,10,5,3,1 maps)."""
    # Cells per image side as MLPerf counts them: 300/8 = 37.5 for the 38x38 map, so the
    # last centres pass the border a little, as in the reference.
    cells = [image_size / s for s in STRIDES] + [float(f) for f in feature_sizes[4:]]
    out = []
    for k, side in enumerate(feature_sizes):
        small, large = SCALES[k] / BASE_SIZE, SCALES[k + 1] / BASE_SIZE
        shapes = [(small, small), (math.sqrt(small * large),) * 2]
        for ratio in ASPECT_RATIOS[k]:
            w, h = small * math.sqrt(ratio), small / math.sqrt(ratio)
            shapes += [(w, h), (h, w)]
        centres = (torch.arange(side, dtype=torch.float64) + 0.5) / cells[k]
        cy, cx = torch.meshgrid(centres, centres, indexing="ij")
        for w, h in shapes:
            out.append(
                torch.stack(
                    [
                        cx.flatten(),
                        cy.flatten(),
                        torch.full_like(cx.flatten(), w),
                        torch.full_like(cx.flatten(), h),
                    ],
                    1,
                )
            )
    return torch.cat(out).float().clamp_(0, 1)


def xywh_to_ltrb(boxes: torch.Tensor) -> torch.Tensor:
    xy, wh = boxes[..., :2], boxes[..., 2:]
    return torch.cat([xy - wh / 2, xy + wh / 2], -1)


def ltrb_to_xywh(boxes: torch.Tensor) -> torch.Tensor:
    lt, rb = boxes[..., :2], boxes[..., 2:]
    return torch.cat([(lt + rb) / 2, rb - lt], -1)


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of every ltrb box of ``a`` (N) with every box of ``b`` (M): N x M."""
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).prod(-1)
    return inter / (area_a[:, None] + area_b[None, :] - inter)


class BoxEncoder:
    """Ground truth -> one target per anchor (the MLPerf encoder, run in the data workers).

    Each anchor takes the box it overlaps most when that IoU passes ``IOU_THRESHOLD``; each
    box also keeps its own best anchor whatever the IoU, so no box goes unmatched. Unmatched
    anchors get label 0 (background) and their own coordinates (a zero offset)."""

    def __init__(self, anchors_xywh: torch.Tensor):
        self.anchors = anchors_xywh
        self.anchors_ltrb = xywh_to_ltrb(anchors_xywh)

    def encode(self, boxes: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """ltrb boxes (N x 4) and labels (N) -> matched xywh boxes (A x 4), labels (A)."""
        iou = box_iou(boxes, self.anchors_ltrb)
        best_iou, best_box = iou.max(0)
        best_anchor = iou.argmax(1)
        best_iou[best_anchor] = 2.0  # above any threshold
        best_box[best_anchor] = torch.arange(len(boxes))
        matched = best_iou > IOU_THRESHOLD
        out_labels = torch.zeros(len(self.anchors), dtype=torch.int64)
        out_labels[matched] = labels[best_box[matched]]
        out = self.anchors_ltrb.clone()
        out[matched] = boxes[best_box[matched]].to(out.dtype)
        return ltrb_to_xywh(out), out_labels

    def decode(self, offsets: torch.Tensor) -> torch.Tensor:
        """Predicted offsets (... x 4 x A, the heads' layout) -> ltrb boxes (... x A x 4)."""
        return xywh_to_ltrb(offsets_to_xywh(offsets, self.anchors.t()).transpose(-1, -2))


def xywh_to_offsets(boxes: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Boxes (... x 4 x A, xywh) as SSD regression targets against anchors (4 x A)."""
    xy = (boxes[..., :2, :] - anchors[:2]) / anchors[2:] / SCALE_XY
    wh = (boxes[..., 2:, :] / anchors[2:]).log() / SCALE_WH
    return torch.cat([xy, wh], -2)


def offsets_to_xywh(offsets: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    xy = offsets[..., :2, :] * SCALE_XY * anchors[2:] + anchors[:2]
    wh = (offsets[..., 2:, :] * SCALE_WH).exp() * anchors[2:]
    return torch.cat([xy, wh], -2)


def hard_negatives(
    losses: torch.Tensor, positive: torch.Tensor, ratio: int = NEGATIVES_PER_POSITIVE
) -> torch.Tensor:
    """The background anchors the confidence loss keeps: per image, the ``ratio`` x
    positives ones with the highest loss (B x A mask), found by ranking every anchor."""
    background = losses.detach().masked_fill(positive, 0)
    order = background.argsort(1, descending=True)
    rank = order.argsort(1)
    wanted = (ratio * positive.sum(1)).clamp(max=positive.size(1))
    return rank < wanted[:, None]


class MultiBoxLoss(torch.nn.Module):
    """SmoothL1 on the positives' offsets + cross-entropy on the positives and the hard
    negatives, per image divided by its positives (an image without any counts 0), then
    averaged over the batch; vectorised over the batch as in MLPerf SSD v0.6."""

    def __init__(self, anchors_xywh: torch.Tensor):
        super().__init__()
        self.register_buffer("anchors", anchors_xywh.t().contiguous())  # 4 x A

    def forward(
        self, ploc: torch.Tensor, plabel: torch.Tensor, gloc: torch.Tensor, glabel: torch.Tensor
    ) -> torch.Tensor:
        """ploc B x 4 x A, plabel B x C x A (the heads); gloc B x 4 x A (xywh), glabel B x A."""
        positive = glabel > 0
        count = positive.sum(1)
        target = xywh_to_offsets(gloc, self.anchors)
        loc = F.smooth_l1_loss(ploc, target, reduction="none").sum(1)
        loc = (positive.float() * loc).sum(1)
        conf = F.cross_entropy(plabel, glabel, reduction="none")
        chosen = positive.float() + hard_negatives(conf, positive).float()
        conf = (conf * chosen).sum(1)
        has_objects = (count > 0).float()
        return ((loc + conf) * has_objects / count.float().clamp(min=1e-6)).mean()


# -- augmentation (runs in the DataLoader workers) -----------------------------------
class SSDCrop:
    """The SSD paper's random crop: keep the image, or crop a patch (sides 0.3-1 of the
    image, aspect 1/2-2) whose IoU with every box is above 0.1/0.3/0.5/0.7/0.9, or any
    patch; boxes whose centre falls outside are dropped, the others clipped. One try per
    drawn mode (MLPerf's setting); a failed try draws a mode again."""

    MODES = (None, 0.1, 0.3, 0.5, 0.7, 0.9, -math.inf)  # None: the whole image

    def __call__(
        self, picture: Any, boxes: torch.Tensor, labels: torch.Tensor
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        while True:
            min_iou = self.MODES[int(torch.randint(len(self.MODES), ()))]
            if min_iou is None:
                return picture, boxes, labels
            w, h = (0.3 + 0.7 * torch.rand(2)).tolist()
            if not 0.5 <= w / h <= 2:
                continue
            left, top = float(torch.rand(()) * (1 - w)), float(torch.rand(()) * (1 - h))
            crop = torch.tensor([[left, top, left + w, top + h]])
            if not bool((box_iou(boxes, crop) > min_iou).all()):
                continue
            centre = (boxes[:, :2] + boxes[:, 2:]) / 2
            inside = ((centre > crop[0, :2]) & (centre < crop[0, 2:])).all(1)
            if not bool(inside.any()):
                continue
            kept = torch.maximum(
                torch.minimum(boxes[inside], crop[0, 2:].repeat(2)), crop[0, :2].repeat(2)
            )
            kept = (kept - crop[0, :2].repeat(2)) / torch.tensor([w, h, w, h])
            width, height = picture.size
            picture = picture.crop(
                (
                    int(left * width),
                    int(top * height),
                    int((left + w) * width),
                    int((top + h) * height),
                )
            )
            return picture, kept, labels[inside]


class TrainTransform:
    """One training example as MLPerf SSD makes it on the CPU: random crop, horizontal
    flip (p 0.5), resize to ``image_size`` squared, colour jitter, ImageNet normalisation,
    then the encoder's per-anchor targets. Called with a PIL picture, its ltrb boxes as
    fractions and its labels; returns (image 3 x S x S, boxes A x 4 xywh, labels A)."""

    def __init__(self, encoder: BoxEncoder, image_size: int = BASE_SIZE):
        from torchvision import transforms

        self.encoder = encoder
        self.crop = SSDCrop()
        self.pixels = transforms.Compose(
            [
                transforms.Resize((image_size, image_size)),
                transforms.ColorJitter(brightness=0.125, contrast=0.5, saturation=0.5, hue=0.05),
                transforms.ToTensor(),
                transforms.Normalize(MEAN, STD),
            ]
        )

    def __call__(
        self, picture: Any, boxes: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        picture, boxes, labels = self.crop(picture, boxes, labels)
        if float(torch.rand(())) < 0.5:
            from PIL import Image

            picture = picture.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            boxes = torch.stack([1 - boxes[:, 2], boxes[:, 1], 1 - boxes[:, 0], boxes[:, 3]], 1)
        boxes, labels = self.encoder.encode(boxes, labels)
        return self.pixels(picture), boxes, labels
