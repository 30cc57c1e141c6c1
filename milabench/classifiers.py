"""torchvision classification networks by name: shared by the convnet and scaling tests
(a model module never imports another model)."""

from __future__ import annotations

import torch
import torchvision

from milarun.experiment import BadTestArguments


def classification_models() -> list[str]:
    return sorted(torchvision.models.list_models(module=torchvision.models))


def check_arch(arch: str) -> None:
    if arch not in classification_models():
        raise BadTestArguments(
            f"bad test argument: --arch {arch!r} is not a torchvision classification model "
            f"(e.g. alexnet, resnet18, resnet50, vgg16; all: {', '.join(classification_models())})"
        )


def build_model(arch: str, num_classes: int) -> torch.nn.Module:
    check_arch(arch)
    kwargs = {}
    if arch in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = True  # silences the "default init changed" warning
    return torchvision.models.get_model(arch, weights=None, num_classes=num_classes, **kwargs)


def logits(output: object) -> torch.Tensor:
    """The main head of a model's output (inception/googlenet return a named tuple)."""
    return output if isinstance(output, torch.Tensor) else output[0]  # type: ignore[index]
