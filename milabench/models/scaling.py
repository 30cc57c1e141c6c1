"""scaling: data-parallel training of a torchvision network on a fixed synthetic batch.

Launched by the gpu-progression scheme as ``python -m torch.distributed.run
--nproc-per-node K -m milarun run milabench.models.scaling:main ...``: each rank trains the
same network wrapped in DistributedDataParallel (nccl on GPUs, gloo on CPU slices) on its own
fixed random batch of ``--batch-size`` images (per rank), every label class 0 as in the
legacy micro-benchmark (its ``randint(0, 1)``), SGD with momentum 0.9. As there, each rank's
CUDA sees its own GPU only (the harness opens it so: milarun.machine.devices.open_own_gpu;
the legacy launcher gave each rank ``CUDA_VISIBLE_DEVICES=<i>``) and cuDNN does not
autotune (the legacy never set ``cudnn.benchmark``). Random labels on one
fixed batch make the network memorise noise and the loss went to NaN within 12 s on an H100.
``--max-count`` counts the examples of one rank. Rank 0 writes the result, with every
rank's rate log as ``train_<rank>``.

Without torchrun it trains the plain network in one process (world size 1, no DDP).

Legacy counterpart: milarun/models/scaling/micro_bench.py (mila-ao-2020-2), which had no
per-step sync either. Left: torchrun + DDP launch (legacy: its own multi-process launcher
and ``init_process_group`` on a tcp:// address).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from milabench import distributed, helpers
from milabench.classifiers import build_model, check_arch, logits
from milarun.experiment import BadTestArguments, Experiment


def main(exp: Experiment, argv: list[str]) -> None:
    # Only rank 0 writes the run's result, even when the arguments are rejected.
    exp.write_result = distributed.env_rank() == 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", default="alexnet", help="torchvision.models network name")
    parser.add_argument(
        "--batch-size", type=helpers.positive_int, default=64, help="examples per rank and step"
    )
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--num-classes", type=int, default=1000)
    args = exp.parse_args(parser, argv)
    for flag in ("image_size", "num_classes"):  # --batch-size: the parser's positive_int
        if getattr(args, flag) < 1:
            raise BadTestArguments(
                f"bad test argument: --{flag.replace('_', '-')} {getattr(args, flag)} (>= 1)"
            )
    check_arch(args.arch)  # before joining the process group: every rank fails fast
    exp.synthetic_data = True  # one fixed random batch by construction

    device = exp.device  # cpu, or cuda:LOCAL_RANK under torchrun
    rank, world_size = distributed.init_from_env(device)
    exp.write_result = rank == 0

    helpers.seed_everything(args.seed)

    with helpers.built_on(device):
        model = build_model(args.arch, args.num_classes).to(device)
    model.train()
    if distributed.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            output_device=device.index if device.type == "cuda" else None,
        )
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    gen = torch.Generator().manual_seed(args.seed + rank)  # each rank its own fixed batch
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=gen).to(
        device
    )
    labels = torch.zeros(args.batch_size, dtype=torch.long, device=device)

    def step() -> torch.Tensor:
        loss = F.cross_entropy(logits(model(images)), labels)
        optimizer.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        loss.backward()
        optimizer.step()
        return loss.detach()

    helpers.train(exp, step, args.batch_size)
    distributed.gather_rate_logs(exp)
    exp.metric("world_size", world_size)
    distributed.shutdown()
