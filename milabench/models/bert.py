"""bert: BERT-large masked-LM pretraining steps at sequence 512, bf16; sequences/s.

transformers' BertForMaskedLM from a BertConfig (BERT-large by default: hidden 1024,
24 layers, 16 heads, MLP 4096, vocabulary 30522), random weights, scaled-dot-product
attention. Each step masks 15% of a fixed batch of random token sequences made on the
device (80% [MASK], 10% a random token, 10% left, as in the BERT paper) and predicts the
masked tokens; bf16 autocast, fused AdamW. One example is one sequence. FLOPs are counted
(FlopCounterMode). Modern suite: no 2020 counterpart.
"""

from __future__ import annotations

import argparse

import torch

from milabench import helpers, llama, modern
from milarun.experiment import BadTestArguments, Experiment

MASK_ID = 103  # [MASK] in BERT's uncased vocabulary


def mask_tokens(tokens: torch.Tensor, vocab: int, gen: torch.Generator) -> tuple:
    """(inputs, labels): 15% of positions chosen, labels -100 elsewhere."""
    device = tokens.device
    chosen = torch.rand(tokens.shape, generator=gen, device=device) < 0.15
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    roll = torch.rand(tokens.shape, generator=gen, device=device)
    inputs = torch.where(chosen & (roll < 0.8), torch.full_like(tokens, MASK_ID), tokens)
    swap = chosen & (roll >= 0.8) & (roll < 0.9)
    random = torch.randint(0, vocab, tokens.shape, generator=gen, device=device)
    return torch.where(swap, random, inputs), labels


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=32)
    parser.add_argument("--seq-len", type=helpers.positive_int, default=512)
    parser.add_argument("--hidden", type=helpers.positive_int, default=1024)
    parser.add_argument("--layers", type=helpers.positive_int, default=24)
    parser.add_argument("--heads", type=helpers.positive_int, default=16)
    parser.add_argument("--intermediate", type=helpers.positive_int, default=4096)
    parser.add_argument("--vocab", type=helpers.positive_int, default=30522)
    parser.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate")
    modern.add_arguments(parser)
    args = exp.parse_args(parser, argv)
    problems = []
    if args.hidden % args.heads:
        problems.append(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")
    if args.vocab <= MASK_ID:
        problems.append(f"--vocab {args.vocab} (> {MASK_ID}, the [MASK] id)")
    if not args.lr > 0:
        problems.append(f"--lr {args.lr} (> 0)")
    if problems:
        raise BadTestArguments("bad test argument: " + "; ".join(problems))
    device = helpers.setup(exp, args)
    exp.synthetic_data = True  # random tokens by construction
    setup = modern.Setup(exp, args, device)
    size = (
        f"a {args.layers}-layer, width-{args.hidden} BERT at sequence {args.seq_len}, "
        f"batch {args.batch_size}"
    )
    exp.arguments["workload"] = size

    with modern.fits(exp, size, device):
        from transformers import BertConfig, BertForMaskedLM

        config = BertConfig(
            vocab_size=args.vocab,
            hidden_size=args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            intermediate_size=args.intermediate,
            max_position_embeddings=max(512, args.seq_len),
            attn_implementation="sdpa",
        )
        with helpers.built_on(device):
            eager = BertForMaskedLM(config).to(device)
        eager.train()
        model = setup.maybe_compile(eager)
        optimizer, setup.settings["optimizer"] = llama.adamw(
            list(eager.parameters()), args.lr, device
        )
        setup.record_attention(
            f"transformers {eager.config._attn_implementation}",
            heads=args.heads,
            seq=args.seq_len,
            head_dim=args.hidden // args.heads,
            dtype=setup.precision.dtype,
        )
        gen = torch.Generator(device=device).manual_seed(args.seed)
        tokens = torch.randint(
            0, args.vocab, (args.batch_size, args.seq_len), generator=gen, device=device
        )
        inputs, labels = mask_tokens(tokens, args.vocab, gen)

        stepper = setup.stepper(lambda net: net(input_ids=inputs, labels=labels).loss, optimizer)

        setup.train(stepper(model), args.batch_size, eager_step=stepper(eager))
