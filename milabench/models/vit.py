"""vit: timm ViT-B/16 training steps at 224 px, bf16; images/s.

``timm.create_model("vit_base_patch16_224", pretrained=False)`` (random weights, no
download): 12 layers, width 768, 12 heads, 196 patches + the class token; timm's attention
calls scaled_dot_product_attention (``fused_attn``). A fixed batch of random images and
labels made on the device, cross-entropy, bf16 autocast, fused AdamW. ``--depth``,
``--embed-dim``, ``--heads``, ``--patch-size`` and ``--image-size`` override the model's own
shape (the quick suite's tiny ViT). One example is one image. FLOPs are counted
(FlopCounterMode). Modern suite: no 2020 counterpart.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from milabench import helpers, llama, modern
from milarun.experiment import BadTestArguments, Experiment


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="vit_base_patch16_224", help="a timm model name")
    parser.add_argument("--batch-size", type=helpers.positive_int, default=256)
    parser.add_argument("--image-size", type=helpers.positive_int, default=224)
    parser.add_argument("--patch-size", type=helpers.positive_int, default=None)
    parser.add_argument("--embed-dim", type=helpers.positive_int, default=None)
    parser.add_argument("--depth", type=helpers.positive_int, default=None)
    parser.add_argument("--heads", type=helpers.positive_int, default=None)
    parser.add_argument("--num-classes", type=helpers.positive_int, default=1000)
    parser.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate")
    modern.add_arguments(parser)
    args = exp.parse_args(parser, argv)
    import timm

    if not timm.is_model(args.model) or not args.model.startswith("vit_"):
        raise BadTestArguments(f"bad test argument: --model {args.model} (a timm vit_* model)")
    overrides = {
        key: value
        for key, value in (
            ("patch_size", args.patch_size),
            ("embed_dim", args.embed_dim),
            ("depth", args.depth),
            ("num_heads", args.heads),
        )
        if value is not None
    }
    device = helpers.setup(exp, args)
    exp.synthetic_data = True  # random images made on the device
    setup = modern.Setup(exp, args, device)
    shape = f" ({', '.join(f'{k} {v}' for k, v in overrides.items())})" if overrides else ""
    size = f"{args.model}{shape} at {args.image_size} px, batch {args.batch_size}"
    exp.arguments["workload"] = size

    with modern.fits(exp, size, device):
        try:
            with helpers.built_on(device):
                eager = timm.create_model(
                    args.model,
                    pretrained=False,
                    img_size=args.image_size,
                    num_classes=args.num_classes,
                    **overrides,
                )
        except (AssertionError, ValueError, TypeError) as err:
            raise BadTestArguments(f"bad test argument: {args.model} {overrides}: {err}") from err
        eager = eager.to(device)
        eager.train()
        model = setup.maybe_compile(eager)
        optimizer, setup.settings["optimizer"] = llama.adamw(
            list(eager.parameters()), args.lr, device
        )
        attn = eager.blocks[0].attn
        tokens = eager.patch_embed.num_patches + getattr(eager, "num_prefix_tokens", 1)
        if getattr(attn, "fused_attn", False):
            setup.record_attention(
                "timm fused_attn (sdpa)",
                heads=attn.num_heads,
                seq=tokens,
                head_dim=attn.head_dim,
                dtype=setup.precision.dtype,
            )
        else:
            setup.record_attention("timm eager (math)")
        gen = torch.Generator(device=device).manual_seed(args.seed)
        batch = (args.batch_size, 3, args.image_size, args.image_size)
        images = torch.randn(batch, generator=gen, device=device)
        labels = torch.randint(
            0, args.num_classes, (args.batch_size,), generator=gen, device=device
        )

        stepper = setup.stepper(lambda net: F.cross_entropy(net(images), labels), optimizer)

        setup.train(stepper(model), args.batch_size, eager_step=stepper(eager))
