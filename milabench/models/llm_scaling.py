"""llm_scaling: the ``llm`` test sharded with FSDP2 (``fully_shard``) over 1..N devices;
tokens/s per GPU, their total and the scaling efficiency.

Launched by the gpu-progression scheme (``torchrun --nproc-per-node K -m milarun run
milabench.models.llm_scaling:main ...``, over nodes through ``milarun slurm scaling``):
each rank builds the same Llama (milabench.llama, the same seed), shards every decoder
layer and then the whole model with ``fully_shard`` over a 1-D mesh of the K ranks (nccl on
GPUs, gloo on CPU slices), and trains on its own fixed batch of random tokens. Precision:
FSDP2's MixedPrecisionPolicy, i.e. fp32 sharded parameters and AdamW state, bf16 unsharded
parameters for the forward and backward, gradients reduced in fp32 (no autocast; said in
efficiency.settings). One example is one token of one rank; ``--max-count`` counts a
rank's tokens. Rank 0 writes the result with every rank's rate log (``train_<rank>``): the
report's Scaling table shows the mean per rank (the scored figure), the total and the
efficiency. FLOPs per token: the 6N + attention formula, as ``llm``.

Without torchrun it trains the plain model in one process (world size 1, no FSDP), with
the precision as an autocast.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from milabench import distributed, helpers, llama, modern
from milarun.experiment import Experiment


def shard(model: Any, device: Any, world_size: int, precision: str) -> str:
    """fully_shard each decoder layer, then the root; returns how precision is applied."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (world_size,))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    if dtype is None:
        return "FSDP2: fp32 parameters, gradients and AdamW state; no mixed precision"
    return (
        f"FSDP2 MixedPrecisionPolicy: fp32 sharded parameters and AdamW state, {precision} "
        "unsharded parameters for forward and backward, gradients reduced in fp32"
    )


def main(exp: Experiment, argv: list[str]) -> None:
    # Only rank 0 writes the run's result, even when the arguments are rejected.
    exp.write_result = distributed.env_rank() == 0
    parser = argparse.ArgumentParser(description=__doc__)
    llama.add_arguments(parser)
    modern.add_arguments(parser)
    args = exp.parse_args(parser, argv)
    llama.check(args)
    exp.synthetic_data = True  # random tokens by construction

    device = exp.device  # cpu, or cuda:LOCAL_RANK under torchrun
    rank, world_size = distributed.init_from_env(device)
    exp.write_result = rank == 0
    helpers.setup(exp, args)  # the same seed: every rank builds the same weights
    setup = modern.Setup(exp, args, device)
    sharded = distributed.is_initialized()
    dtype = setup.precision.dtype  # before FSDP2 takes the precision over

    with modern.fits(exp, llama.size(args), device):
        with helpers.built_on(device):  # each rank its full copy, then sharded
            model = llama.build(args)
        size = llama.size(args, modern.parameters(model)) + f", {world_size} rank(s)"
        exp.arguments["workload"] = size
        if sharded:
            # FSDP2 applies the precision itself: autocast would cast again.
            setup.settings["mixed_precision"] = shard(model, device, world_size, args.precision)
            setup.precision = helpers.Precision(device, "fp32")
            setup.settings["fsdp"] = f"fully_shard per decoder layer and root, {world_size} ranks"
        model = model.to(device)
        model.train()
        eager = model
        model = setup.maybe_compile(model)
        optimizer, setup.settings["optimizer"] = llama.adamw(
            list(eager.parameters()), args.lr, device
        )
        shape = llama.attention_shape(args, dtype)
        setup.record_attention(f"transformers {eager.config._attn_implementation}", **shape)
        batch = llama.tokens(args, device, args.seed + rank)  # each rank its own batch

        stepper = setup.stepper(lambda net: net(input_ids=batch, labels=batch).loss, optimizer)

    with modern.fits(exp, size, device):
        setup.train(
            stepper(model),
            args.batch_size * args.seq_len,
            formula=llama.formula(eager, args, setup.matmul_precision),
            eager_step=stepper(eager),
        )
    distributed.gather_rate_logs(exp)
    exp.metric("world_size", world_size)
    distributed.shutdown()
