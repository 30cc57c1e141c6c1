"""milarun's FLOPs per example of a test, from the test and its recorded arguments, never
from the result's ``efficiency``: what the ``evidence`` rule bounds a rate with.

- gemm: an example is 10^12 FLOPs by its definition (milabench/models/gemm.py: a block of
  ``repeat`` n x n x n products counts 2 n^3 x repeat / 10^12 examples).
- llm, llm-scaling: the PaLM formula the tests use (6 N + 12 L d s per token, N the
  parameters without the input embedding), N counted here from the Llama configuration the
  arguments make (no bias, untied output layer, RMSNorm weights).
- every other test that records counted FLOPs (the modern BERT, ViT, ResNet-50, diffusion,
  the 2020 models): torch's FlopCounterMode over one training step, a function of the
  test's shape arguments (shape_key: its recorded arguments but the batch, run length,
  optimizer...). flops-counted.json, shipped with the release and made by
  scripts/count-flops.py on a real counted step, holds the figures this release counts,
  each for the arguments it was counted with; FLOPs per example do not depend on the batch
  (the script checks it on each entry) nor on the device. Other arguments: not recomputed,
  and verify says so.

A test's recorded arguments are also read against its argv: a shape argument the argv sets
must be recorded with that value (a forger who edits the recorded ``seq_len`` to match a
smaller FLOPs figure is caught there).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from milarun.measure import flops_formulas as formulas
from milarun.results.read import ResultView
from milarun.tender import flops_shapes

TERA = 1e12
LLAMA = "PaLM formula 6N + 12 L d s per token"
COUNTED_HOW = "FlopCounterMode count of this release"

# The arguments a test's argv is checked against (the shapes a forger would edit).
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
    "milabench.models.wlm:main": ("model", "emsize", "nhid", "nlayers", "bptt", "precision"),
    "milabench.models.sine_wave:main": ("samples", "seq_len", "hidden"),
    "milabench.models.translator:main": ("hidden_size", "num_layers", "max_length"),
}  # fmt: skip
# Recorded arguments that change nothing a step's FLOPs per example count: the batch (the
# counted FLOPs per example are checked equal at two batches for every table entry, by
# scripts/count-flops.py), run length, optimizer, loader, memory layout, compile (the
# counted step is the eager one), the tf32 switch and the recorded descriptions. Any other
# argument is part of an entry's key: an argument set the table lacks is not recomputed.
NOT_SHAPE = frozenset(
    {
        "batch_size", "max_count", "min_slices", "ci_target", "seed", "lr", "momentum",
        "weight_decay", "workers", "no_channels_last", "compile", "tf32", "precision_used",
        "workload", "clip", "log_interval", "data",
    }
)  # fmt: skip
TABLE = Path(__file__).with_name("flops-counted.json")  # made by scripts/count-flops.py
# Precisions an argument names outright: the peak that bounds the count. "auto" and fp32
# depend on the device (fp16 or tf32 on a GPU): those entries leave the bid's split in force.
NAMED_PRECISIONS = ("bf16", "fp16")


def shape_key(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded arguments of a call that can change its FLOPs per example."""
    return {k: v for k, v in sorted(arguments.items()) if k not in NOT_SHAPE}


@cache
def counted() -> dict[str, list[tuple[dict[str, Any], float]]]:
    """The shipped table: experiment function -> (shape key, FLOPs per example) counted."""
    table: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for entry in json.loads(TABLE.read_text())["entries"]:
        table.setdefault(entry["function"], []).append(
            (entry["arguments"], float(entry["flops_per_example"]))
        )
    return table


LLAMA_TESTS = ("milabench.models.llm:main", "milabench.models.llm_scaling:main")
LLAMA_ARGS = ("seq_len", "hidden", "layers", "heads", "kv_heads", "intermediate", "vocab")


@dataclass(frozen=True)
class Expected:
    value: float  # FLOPs per example
    how: str  # the formula or table it came from
    precision: str | None  # the precision its matmuls run in, the peak that bounds them
    high: float | None = None  # where the count's convention is a range: its top (flops_shapes)


def llama_flops_per_token(args: Mapping[str, int]) -> float:
    """6 N + 12 L d s: N the parameters of a Llama without its input embedding."""
    d, layers, inter, vocab = args["hidden"], args["layers"], args["intermediate"], args["vocab"]
    kv = d // args["heads"] * args["kv_heads"]
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * inter + 2 * d  # q, o; k, v; MLP; 2 norms
    n = layers * per_layer + d + vocab * d  # the final norm, the output layer
    return float(6 * n + 12 * layers * d * args["seq_len"])


WORD_LM = "milabench.models.wlm:main"
WORD_LM_ARGS = ("emsize", "nhid", "nlayers", "bptt")
SINE_WAVE = "milabench.models.sine_wave:main"
SINE_WAVE_ARGS = ("seq_len", "hidden")
GNMT_LENGTHS = ("source", "source_padded", "target", "cross")
SINE_WAVE_HELD_OUT = 3  # the waves toy_lstm sets aside (milabench/models/sine_wave.py)
# Tests no FLOPs figure bounds, and why (said on verify's PASS line).
UNBOUNDED = {
    "milabench.models.loader:main": "loader: no FLOPs (it reads and decodes images)",
    **{
        f"milabench.models.{rl}:main": f"{rl}: an RL test, its examples are environment steps "
        "a simulator plays on the CPU (no FLOPs a counter sees; its policy network's are not "
        "the work the rate counts)"
        for rl in ("cart", "minigrid", "atari")
    },
}


def _positive(args: Mapping[str, Any], keys: tuple[str, ...]) -> bool:
    return all(isinstance(args.get(k), int) and args[k] > 0 for k in keys)


def word_lm(args: Mapping[str, Any], synthetic: bool) -> Expected | str:
    """wlm's FLOPs per example by milarun's formula. The decoder's width is WikiText-2's
    vocabulary (padded to 8 under mixed precision, as the test does); a run on synthetic
    text records its own, which may be smaller, never larger."""
    if not _positive(args, WORD_LM_ARGS) or args.get("model") not in formulas.RNN_GATES:
        return "wlm: its shape arguments are not positive whole numbers and a known cell"
    mixed = args.get("precision_used") in NAMED_PRECISIONS
    vocabulary = formulas.WIKI2_VOCABULARY + (-formulas.WIKI2_VOCABULARY % 8 if mixed else 0)
    recorded = args.get("vocabulary")
    if synthetic and isinstance(recorded, int) and 0 < recorded < vocabulary:
        vocabulary = recorded
    value = formulas.word_lm_per_example(
        args["model"], args["emsize"], args["nhid"], args["nlayers"], vocabulary, args["bptt"]
    )
    precision = args.get("precision_used")
    return Expected(value, formulas.WORD_LM, precision if mixed else None)


TRANSLATOR = "milabench.models.translator:main"


def translator(args: Mapping[str, Any]) -> Expected | str:
    """translator's FLOPs per pair by milarun's formula at the mean lengths the result
    records (its pairs' lengths come from the data, not its arguments), each within what
    ``--max-length`` allows: a forger may shorten them, never below one token."""
    lengths = args.get("lengths")
    if not _positive(args, ("hidden_size", "num_layers", "vocabulary", "max_length")):
        return "translator: its shape arguments are not positive whole numbers"
    cap = int(args["max_length"])
    if not isinstance(lengths, Mapping) or set(lengths) != set(GNMT_LENGTHS):
        return "translator: no recorded lengths (a result made before issue 46)"
    if not all(isinstance(v, (int, float)) for v in lengths.values()):
        return "translator: its recorded lengths are not numbers"
    source, padded, target, cross = (float(lengths[k]) for k in GNMT_LENGTHS)
    if not (1 <= source <= padded <= cap and 1 <= target <= cap and target <= cross <= cap * cap):
        return f"translator: its recorded lengths {dict(lengths)} are outside 1..{cap} tokens"
    value = formulas.gnmt_per_pair(
        args["hidden_size"], args["num_layers"], args["vocabulary"], source, padded, target, cross
    )
    return Expected(value, formulas.GNMT, None)


def sine_wave(args: Mapping[str, Any]) -> Expected | str:
    """toy_lstm's FLOPs per counted example by milarun's formula (fp32 only)."""
    samples = args.get("samples")
    if samples is None and isinstance(args.get("batch_size"), int):
        samples = args["batch_size"] + SINE_WAVE_HELD_OUT
    if not _positive(args, SINE_WAVE_ARGS) or not isinstance(samples, int):
        return "sine_wave: its shape arguments are not positive whole numbers"
    if samples <= SINE_WAVE_HELD_OUT:
        return f"sine_wave: --samples {samples} trains no wave"
    value = formulas.sine_wave_per_example(
        samples, SINE_WAVE_HELD_OUT, args["seq_len"], args["hidden"]
    )
    return Expected(value, formulas.SINE_WAVE, None)


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
    call = view.call
    if call is None:
        return None, None
    return (call.function if isinstance(call.function, str) else None, call.arguments)


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
    if function in LLAMA_TESTS:
        if not all(isinstance(args.get(k), int) and args[k] > 0 for k in LLAMA_ARGS):
            return f"{test}: its Llama shape arguments are not positive whole numbers"
        precision = args.get("precision")
        return Expected(
            llama_flops_per_token(args), LLAMA, precision if isinstance(precision, str) else None
        )
    if function == WORD_LM:
        return word_lm(args, view.synthetic_data)
    if function == SINE_WAVE:
        return sine_wave(args)
    if function == TRANSLATOR:
        return translator(args)
    if function in UNBOUNDED:
        return UNBOUNDED[function]
    key = shape_key(args)
    named = key.get("precision") if key.get("precision") in NAMED_PRECISIONS else None
    # the formula where every recorded shape argument is one it reads
    known = set(key) <= set(SHAPES.get(function, ()))
    span = flops_shapes.transformer(function, key) if known else None
    if span is not None:
        return Expected(span[0], flops_shapes.FORMULA, named, high=span[1])
    entries = counted().get(function)
    if entries is None:
        return f"no FLOPs formula or table for {test}"
    for shape, value in entries:
        if shape == key:
            return Expected(value, COUNTED_HOW, named)
    scaled = flops_shapes.resnet(function, key, entries)
    if scaled is not None:
        return Expected(scaled, flops_shapes.SCALED, named)
    return f"{test} with other arguments than this release counted"
