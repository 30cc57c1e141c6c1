"""llm: pretraining steps of a Llama-architecture decoder, bf16, fused attention; tokens/s.

transformers' LlamaForCausalLM from a LlamaConfig (milabench.llama: ~1.1B parameters at
sequence 2048 by default), random weights, causal LM loss on a fixed batch of random tokens
made on the device, bf16 autocast, scaled-dot-product attention, fused AdamW. One example is
one token: a step trains ``--batch-size`` x ``--seq-len`` examples. FLOPs per token come
from the 6N + attention formula (efficiency.method says so). Modern suite: no 2020
counterpart.
"""

from __future__ import annotations

import argparse

from milabench import helpers, llama, modern
from milarun.experiment import Experiment


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    llama.add_arguments(parser)
    modern.add_arguments(parser)
    args = exp.parse_args(parser, argv)
    llama.check(args)
    device = helpers.setup(exp, args)
    exp.synthetic_data = True  # random tokens by construction
    setup = modern.Setup(exp, args, device)

    with modern.fits(exp, llama.size(args), device):
        with helpers.built_on(device):
            eager = llama.build(args).to(device)
        eager.train()
        size = llama.size(args, modern.parameters(eager))
        exp.arguments["workload"] = size
        model = setup.maybe_compile(eager)
        optimizer, setup.settings["optimizer"] = llama.adamw(
            list(eager.parameters()), args.lr, device
        )
        setup.record_attention(
            f"transformers {eager.config._attn_implementation}",
            **llama.attention_shape(args, setup.precision.dtype),
        )
        batch = llama.tokens(args, device, args.seed)

        stepper = setup.stepper(lambda net: net(input_ids=batch, labels=batch).loss, optimizer)

    with modern.fits(exp, size, device):
        setup.train(
            stepper(model),
            args.batch_size * args.seq_len,
            formula=llama.formula(eager, args, setup.matmul_precision),
            eager_step=stepper(eager),
        )
