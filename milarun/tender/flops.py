"""milarun's FLOPs per example of a test, from the test and its recorded arguments, never
from the result's ``efficiency``: what the ``evidence`` rule bounds a rate with.

- gemm: an example is 10^12 FLOPs by its definition (milabench/models/gemm.py: a block of
  ``repeat`` n x n x n products counts 2 n^3 x repeat / 10^12 examples).
- llm, llm-scaling: the PaLM formula the tests use (6 N + 12 L d s per token, N the
  parameters without the input embedding), N counted here from the Llama configuration the
  arguments make (no bias, untied output layer, RMSNorm weights).
- the counted tests (BERT, ViT, ResNet-50, diffusion): torch's FlopCounterMode over one
  training step, a function of the model's shape arguments: COUNTED holds the figures this
  release counted (the H100 modern run of 2026-11-28, torch 2.11), each for the arguments
  it was counted with. Other arguments: not recomputed, and verify says so.

A test's recorded arguments are also read against its argv: a shape argument the argv sets
must be recorded with that value (a forger who edits the recorded ``seq_len`` to match a
smaller FLOPs figure is caught there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from milarun.results.read import ResultView

TERA = 1e12
LLAMA = "PaLM formula 6N + 12 L d s per token"
COUNTED_HOW = "FlopCounterMode count of this release"

# experiment function -> its shape arguments -> (those arguments' values, FLOPs per example,
# precision). Counted with the arguments of the modern profile (milarun/profiles/modern.json)
# on the H100 run kept in tests/data/gpu-runs/h100-2026-11-28.
SHAPES: dict[str, tuple[str, ...]] = {
    "milabench.models.bert:main": (
        "seq_len", "hidden", "layers", "heads", "intermediate", "vocab", "precision",
    ),
    "milabench.models.vit:main": (
        "model", "image_size", "patch_size", "embed_dim", "depth", "heads", "num_classes",
        "precision",
    ),
    "milabench.models.resnet50:main": ("image_size", "num_classes", "precision"),
    "milabench.models.diffusion:main": (
        "latent_size", "text_length", "channels", "layers_per_block", "cross_attention_dim",
        "heads", "norm_groups", "precision",
    ),
}  # fmt: skip
COUNTED: dict[str, list[tuple[dict[str, Any], float]]] = {
    "milabench.models.bert:main": [
        (
            {"seq_len": 512, "hidden": 1024, "layers": 24, "heads": 16, "intermediate": 4096,
             "vocab": 30522, "precision": "bf16"},
            1117142384640.0,
        ),
    ],
    "milabench.models.vit:main": [
        (
            {"model": "vit_base_patch16_224", "image_size": 224, "patch_size": None,
             "embed_dim": None, "depth": None, "heads": None, "num_classes": 1000,
             "precision": "bf16"},
            105867085824.0,
        ),
    ],
    "milabench.models.resnet50:main": [
        ({"image_size": 224, "num_classes": 1000, "precision": "bf16"}, 24299077632.0),
    ],
    "milabench.models.diffusion:main": [
        (
            {"latent_size": 64, "text_length": 77, "channels": [320, 640, 1280, 1280],
             "layers_per_block": 2, "cross_attention_dim": 768, "heads": 8, "norm_groups": 32,
             "precision": "bf16"},
            2469799198720.0,
        ),
    ],
}  # fmt: skip
LLAMA_TESTS = ("milabench.models.llm:main", "milabench.models.llm_scaling:main")
LLAMA_ARGS = ("seq_len", "hidden", "layers", "heads", "kv_heads", "intermediate", "vocab")


@dataclass(frozen=True)
class Expected:
    value: float  # FLOPs per example
    how: str  # the formula or table it came from
    precision: str | None  # the precision its matmuls run in, the peak that bounds them


def llama_flops_per_token(args: Mapping[str, int]) -> float:
    """6 N + 12 L d s: N the parameters of a Llama without its input embedding."""
    d, layers, inter, vocab = args["hidden"], args["layers"], args["intermediate"], args["vocab"]
    kv = d // args["heads"] * args["kv_heads"]
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * inter + 2 * d  # q, o; k, v; MLP; 2 norms
    n = layers * per_layer + d + vocab * d  # the final norm, the output layer
    return float(6 * n + 12 * layers * d * args["seq_len"])


def _argv_value(argv: tuple[Any, ...] | None, key: str) -> str | None:
    """The last value the argv gives ``--key`` (``--seq-len 512``), None where it does not."""
    flag, found = "--" + key.replace("_", "-"), None
    words = [str(w) for w in argv or ()]
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith(flag + "="):
            found = word.partition("=")[2]
    return found


def _call(view: ResultView) -> tuple[str | None, Mapping[str, Any] | None]:
    call = view.data.get("call")
    function = call.get("function") if isinstance(call, Mapping) else None
    args = call.get("arguments") if isinstance(call, Mapping) else None
    return (
        function if isinstance(function, str) else None,
        args if isinstance(args, Mapping) else None,
    )


def argv_problem(view: ResultView) -> str | None:
    """A shape argument recorded with another value than its argv gives it, or None."""
    function, args = _call(view)
    keys = LLAMA_ARGS if function in LLAMA_TESTS else SHAPES.get(function or "", ())
    argv = view.call.argv if view.call is not None else None
    recorded: Mapping[str, Any] = args or {}
    for key in keys if args is not None else ():
        given = _argv_value(argv, key)
        if given is not None and given != str(recorded.get(key)):
            return f"call.arguments.{key} {str(recorded.get(key))[:20]} but its argv {given[:20]}"
    return None


def expected(view: ResultView) -> Expected | str:
    """milarun's FLOPs per example of a result, or why it has none."""
    function, args = _call(view)
    if function is None or args is None:
        return "no recorded call"
    test = function.rpartition(".")[2].partition(":")[0] or function[:60]
    if function == "milabench.models.gemm:main":
        return Expected(TERA, "definition of a gemm example (10^12 FLOPs)", "bf16")
    keys = LLAMA_ARGS if function in LLAMA_TESTS else SHAPES.get(function)
    if keys is None:
        return f"no FLOPs formula or table for {test}"
    if function in LLAMA_TESTS:
        if not all(isinstance(args.get(k), int) and args[k] > 0 for k in LLAMA_ARGS):
            return f"{test}: its Llama shape arguments are not positive whole numbers"
        precision = args.get("precision")
        return Expected(
            llama_flops_per_token(args), LLAMA, precision if isinstance(precision, str) else None
        )
    for shape, value in COUNTED.get(function, []):
        if all(args.get(k) == v for k, v in shape.items()):
            return Expected(value, COUNTED_HOW, str(shape["precision"]))
    return f"{test} with other arguments than this release counted"
