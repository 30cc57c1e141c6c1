"""The Llama-architecture decoder of the ``llm`` and ``llm_scaling`` tests.

transformers' LlamaForCausalLM built from a LlamaConfig (random weights, never a download),
scaled-dot-product attention (``attn_implementation="sdpa"``), causal LM loss on a fixed
batch of random tokens made on the device, AdamW (fused where torch has it). One example is
one token. The defaults are the modern profile's ~1.1B model (the TinyLlama-1.1B shape:
hidden 2048, 22 layers, 32 heads, 4 key/value heads, MLP 5632, vocabulary 32000) at
sequence 2048.

FLOPs per token come from the standard formula, not from a counted step: 6 N (forward and
backward through every weight but the input embedding, a lookup) + 12 L d s (attention
scores and their weighted sum: L layers, d the model width, s the sequence), as in the
PaLM paper's appendix B; causal masking is not discounted.
"""

from __future__ import annotations

import argparse
from typing import Any

from milabench import helpers, modern
from milarun.experiment import BadTestArguments
from milarun.measure.efficiency import Formula

FORMULA = "formula: 6N + 12 L d s per token (PaLM, appendix B), N without the input embedding"


def add_arguments(parser: argparse.ArgumentParser, batch_size: int = 8) -> None:
    parser.add_argument("--batch-size", type=helpers.positive_int, default=batch_size)
    parser.add_argument("--seq-len", type=helpers.positive_int, default=2048)
    parser.add_argument("--hidden", type=helpers.positive_int, default=2048)
    parser.add_argument("--layers", type=helpers.positive_int, default=22)
    parser.add_argument("--heads", type=helpers.positive_int, default=32)
    parser.add_argument("--kv-heads", type=helpers.positive_int, default=4)
    parser.add_argument("--intermediate", type=helpers.positive_int, default=5632)
    parser.add_argument("--vocab", type=helpers.positive_int, default=32000)
    parser.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate")


def check(args: argparse.Namespace) -> None:
    problems = []
    if args.hidden % args.heads:
        problems.append(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")
    if args.heads % args.kv_heads:
        problems.append(f"--heads {args.heads} is not a multiple of --kv-heads {args.kv_heads}")
    if (args.hidden // args.heads) % 2:
        problems.append(f"the head size {args.hidden // args.heads} is odd (rotary needs even)")
    if not args.lr > 0:
        problems.append(f"--lr {args.lr} (> 0)")
    if problems:
        raise BadTestArguments("bad test argument: " + "; ".join(problems))


def size(args: argparse.Namespace, params: int | None = None) -> str:
    """The run's size in words, for the result and an ``oom`` message."""
    n = (
        f"{modern.billions(params)}-parameter"
        if params
        else (f"{args.layers}-layer, width-{args.hidden}")
    )
    return f"a {n} Llama at sequence {args.seq_len}, batch {args.batch_size}"


def build(args: argparse.Namespace) -> Any:
    """LlamaForCausalLM from its configuration, made on the device of the context
    (helpers.built_on), else on the CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.seq_len,
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(config)


def formula(model: Any, args: argparse.Namespace, precision: str) -> Formula:
    embedding = model.get_input_embeddings().weight.numel()
    n = sum(p.numel() for p in model.parameters()) - embedding
    per_token = 6 * n + 12 * args.layers * args.hidden * args.seq_len
    return Formula(float(per_token), precision, FORMULA)


def tokens(args: argparse.Namespace, device: Any, seed: int) -> Any:
    """A fixed (batch, seq) batch of random token ids, made on the device."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(
        0, args.vocab, (args.batch_size, args.seq_len), generator=gen, device=device
    )


def adamw(params: Any, lr: float, device: Any) -> Any:
    """AdamW, fused (one kernel for every parameter) where torch has it for the device."""
    import torch

    try:
        return torch.optim.AdamW(params, lr=lr, fused=True), "AdamW (fused)"
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(params, lr=lr, foreach=True), "AdamW (foreach)"


def attention_shape(args: argparse.Namespace, dtype: Any) -> dict[str, Any]:
    return {
        "heads": args.heads,
        "kv_heads": args.kv_heads,
        "seq": args.seq_len,
        "head_dim": args.hidden // args.heads,
        "dtype": dtype,
        "causal": True,
    }
