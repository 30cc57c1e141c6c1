"""diffusion: Stable Diffusion 1.5 UNet training steps (noise prediction), bf16; images/s.

diffusers' UNet2DConditionModel with the Stable Diffusion 1.5 configuration by default
(block channels 320/640/1280/1280, 2 layers per block, cross-attention to 768-wide text
states, 8 heads, 32 norm groups; ~860M parameters), random weights. Each step trains on a
fixed batch of 64x64x4 latents and 77x768 text states made on the device: noise added at a
random timestep with SD 1.5's scaled-linear schedule (diffusers' DDPMScheduler, 1000
steps), the UNet predicts the noise, mean-squared error; bf16 autocast, fused AdamW. The
VAE and the text encoder are left out (frozen in SD training: their inputs are cached
latents and states). ``--channels`` and friends shrink it (the quick suite's small UNet).
One example is one image. FLOPs are counted (FlopCounterMode). Modern suite: no 2020
counterpart.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from milabench import helpers, llama, modern
from milarun.experiment import BadTestArguments, Experiment


def channels(text: str) -> tuple[int, ...]:
    try:
        found = tuple(int(c) for c in text.split(","))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers") from err
    if len(found) < 2 or min(found) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: at least two positive widths")
    return found


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=32)
    parser.add_argument("--latent-size", type=helpers.positive_int, default=64)
    parser.add_argument("--text-length", type=helpers.positive_int, default=77)
    parser.add_argument(
        "--channels",
        type=channels,
        default=(320, 640, 1280, 1280),
        help="block widths; every block but the last has cross-attention",
    )
    parser.add_argument("--layers-per-block", type=helpers.positive_int, default=2)
    parser.add_argument("--cross-attention-dim", type=helpers.positive_int, default=768)
    parser.add_argument("--heads", type=helpers.positive_int, default=8)
    parser.add_argument("--norm-groups", type=helpers.positive_int, default=32)
    parser.add_argument("--lr", type=float, default=1e-5, help="AdamW learning rate")
    modern.add_arguments(parser)
    args = exp.parse_args(parser, argv)
    problems = [
        f"--channels {c} is not a multiple of --norm-groups {args.norm_groups} and --heads "
        f"{args.heads}"
        for c in args.channels
        if c % args.norm_groups or c % args.heads
    ]
    if args.latent_size % 2 ** (len(args.channels) - 1):
        problems.append(
            f"--latent-size {args.latent_size} does not halve {len(args.channels) - 1} times"
        )
    if problems:
        raise BadTestArguments("bad test argument: " + "; ".join(problems))
    device = helpers.setup(exp, args)
    exp.synthetic_data = True  # random latents and text states made on the device
    setup = modern.Setup(exp, args, device)
    size = (
        f"a UNet of widths {'/'.join(map(str, args.channels))} on {args.latent_size}x"
        f"{args.latent_size}x4 latents, batch {args.batch_size}"
    )
    exp.arguments["workload"] = size

    with modern.fits(exp, size, device):
        from diffusers import DDPMScheduler, UNet2DConditionModel

        blocks = len(args.channels)
        with helpers.built_on(device):
            eager = UNet2DConditionModel(
                sample_size=args.latent_size,
                in_channels=4,
                out_channels=4,
                down_block_types=("CrossAttnDownBlock2D",) * (blocks - 1) + ("DownBlock2D",),
                up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (blocks - 1),
                block_out_channels=args.channels,
                layers_per_block=args.layers_per_block,
                cross_attention_dim=args.cross_attention_dim,
                attention_head_dim=args.heads,  # SD 1.5's config: this number is the head count
                norm_num_groups=args.norm_groups,
            ).to(device)
        eager.train()
        model = setup.maybe_compile(eager)
        optimizer, setup.settings["optimizer"] = llama.adamw(
            list(eager.parameters()), args.lr, device
        )
        processor = type(next(iter(eager.attn_processors.values()))).__name__
        setup.record_attention(
            f"diffusers {processor}",
            heads=args.heads,
            seq=args.latent_size**2,
            head_dim=args.channels[0] // args.heads,
            dtype=setup.precision.dtype,
        )
        schedule = DDPMScheduler(
            num_train_timesteps=1000,
            beta_start=0.00085,
            beta_end=0.012,
            beta_schedule="scaled_linear",
        )
        gen = torch.Generator(device=device).manual_seed(args.seed)
        shape = (args.batch_size, 4, args.latent_size, args.latent_size)
        latents = torch.randn(shape, generator=gen, device=device)
        text = torch.randn(
            (args.batch_size, args.text_length, args.cross_attention_dim),
            generator=gen,
            device=device,
        )

        def stepper(net: torch.nn.Module):
            def step() -> torch.Tensor:
                noise = torch.randn(shape, generator=gen, device=device)
                t = torch.randint(0, 1000, (args.batch_size,), generator=gen, device=device)
                noisy = schedule.add_noise(latents, noise, t)
                with setup.autocast():
                    predicted = net(noisy, t, encoder_hidden_states=text).sample
                    loss = F.mse_loss(predicted.float(), noise)
                optimizer.zero_grad(set_to_none=True)
                setup.backward(loss, optimizer)
                return loss.detach()

            return step

        setup.train(stepper(model), args.batch_size, eager_step=stepper(eager))
