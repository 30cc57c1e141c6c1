"""milarun's FLOPs at shapes its counted table has no entry for (milarun.tender.flops): a
shape argument overridden after ``--`` stays bounded.

- BERT and ViT by formula, in the counter's convention (a matmul is 2 m k n; a training step
  3 x the forward matmuls; the patch embedding 2 x: an image has no gradient). Their
  attention is counted as torch's FlopCounterMode counts the kernel the device ran: 3 x its
  forward where SDPA runs as plain matmuls, 3.5 x where it runs a fused kernel whose backward
  recomputes the scores (flash, efficient, the CPU's flash). So milarun's figure is a range,
  low to high, and the peak is applied to the low end. Every counted table entry lies on
  one end (tests/tender/test_flops_formulas.py): BERT at 128 tokens counted on the CPU is
  the low end, at 512 on the H100 the high end; ViT's both the high end.
- ResNets by image size: every convolution's output is the input's size over its stride,
  exactly where the size is a multiple of 32, so the convolutions' FLOPs scale with the area
  from a counted entry of the same network, and the classifier's (3 x 2 x features x
  classes) with the classes. ResNet-50's entry at 32 px gives its entry at 224 px exactly.

Other shapes (diffusion, dcgan, fast_style, reso, recom, ssd, vae, a timm model other than
the ViT-{tiny, small, base, large}/16 and /32 sizes): an entry each, or verify says "not
recomputed".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

TRAIN = 3  # forward + the backward's two products per matmul
FUSED_ATTENTION = 3.5  # + the backward's recomputed scores (torch's sdpa_backward_flop)
BERT = "milabench.models.bert:main"
VIT = "milabench.models.vit:main"
BERT_ARGS = ("seq_len", "hidden", "layers", "heads", "intermediate", "vocab")
# timm's ViT sizes: width, depth, heads (MLP 4 x width, a class token, the head on it)
VIT_SIZES = {"tiny": (192, 12, 3), "small": (384, 12, 6), "base": (768, 12, 12),
             "large": (1024, 24, 16)}  # fmt: skip
VIT_NAME = re.compile(r"vit_(tiny|small|base|large)_patch(16|32)_(224|384)$")
FORMULA = "formula 3 x the matmuls + 3 to 3.5 x the attention (math or fused SDPA)"
# ResNet tests: the argument that sets the image size, and the classifier's input width
RESNETS = {
    "milabench.models.resnet50:main": "image_size",
    "milabench.models.convnet:main": "crop_size",
}
FEATURES = {"resnet18": 512, "resnet34": 512, "resnet50": 2048, "resnet101": 2048,
            "resnet152": 2048}  # fmt: skip
SCALED = "FlopCounterMode count of this release, scaled to the image size"
STRIDE = 32  # a ResNet's total stride


def _whole(args: Mapping[str, Any], keys: tuple[str, ...]) -> bool:
    return all(isinstance(args.get(k), int) and args[k] > 0 for k in keys)


def _range(linear: float, attention: float) -> tuple[float, float]:
    return TRAIN * linear + TRAIN * attention, TRAIN * linear + FUSED_ATTENTION * attention


def bert(args: Mapping[str, Any]) -> tuple[float, float] | None:
    """BertForMaskedLM per sequence: per token its layers' Q, K, V, O and MLP, the MLM head's
    transform and decoder over every position; per layer attention 4 s^2 d."""
    if not _whole(args, BERT_ARGS):
        return None
    s, d, layers = args["seq_len"], args["hidden"], args["layers"]
    per_token = layers * (8 * d * d + 4 * d * args["intermediate"]) + 2 * d * d
    per_token += 2 * d * args["vocab"]
    return _range(s * per_token, 4 * layers * s * s * d)


def vit(args: Mapping[str, Any]) -> tuple[float, float] | None:
    """timm's ViT per image: the patch embedding (forward and weight gradient), per token
    its blocks' Q, K, V, O and MLP (4 x width), attention 4 n^2 d per block, the head on the
    class token."""
    name = VIT_NAME.match(str(args.get("model")))
    if name is None or not _whole(args, ("image_size", "num_classes")):
        return None
    width, depth, heads = VIT_SIZES[name.group(1)]
    d = args.get("embed_dim") or width
    layers = args.get("depth") or depth
    patch = args.get("patch_size") or int(name.group(2))
    if not all(isinstance(v, int) and v > 0 for v in (d, layers, patch)):
        return None
    grid = (args["image_size"] // patch) ** 2
    tokens = grid + 1
    embed = 2 * 2 * 3 * patch * patch * d * grid
    low, high = _range(tokens * layers * 24 * d * d, 4 * layers * tokens * tokens * d)
    head = TRAIN * 2 * d * args["num_classes"]
    return embed + head + low, embed + head + high


def transformer(function: str, args: Mapping[str, Any]) -> tuple[float, float] | None:
    """BERT's or ViT's FLOPs per example, low and high (None: not these, or bad shapes)."""
    if function == BERT:
        return bert(args)
    if function == VIT:
        return vit(args)
    return None


def _classifier(args: Mapping[str, Any], arch: str) -> float | None:
    features, classes = FEATURES.get(arch), args.get("num_classes")
    if features is None or not isinstance(classes, int) or classes <= 0:
        return None
    return float(TRAIN * 2 * features * classes)


def resnet(
    function: str, args: Mapping[str, Any], entries: list[tuple[dict[str, Any], float]]
) -> float | None:
    """A ResNet's FLOPs per example at an image size (a multiple of 32) from a counted entry
    of the same network at another, by area; None where no entry scales to it."""
    size_arg = RESNETS.get(function)
    size = args.get(size_arg or "")
    arch = str(args.get("arch", "resnet50"))
    if size_arg is None or not isinstance(size, int) or size <= 0 or size % STRIDE:
        return None
    fixed = {k: v for k, v in args.items() if k not in (size_arg, "num_classes")}
    mine = _classifier(args, arch)
    for shape, value in entries:
        counted_size = shape.get(size_arg)
        theirs = _classifier(shape, arch)
        same = {k: v for k, v in shape.items() if k not in (size_arg, "num_classes")} == fixed
        if not same or mine is None or theirs is None or not isinstance(counted_size, int):
            continue
        if counted_size > 0 and counted_size % STRIDE == 0:
            return mine + (value - theirs) * (size / counted_size) ** 2
    return None
