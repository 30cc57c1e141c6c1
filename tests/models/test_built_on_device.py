"""Every model is built where it trains (issue 36): inside ``helpers.built_on(device)`` each
constructor makes every parameter and buffer on that device, never on the CPU first. Built
on the meta device here (no GPU on this machine), which also fails a constructor that reads
a weight's values (a CPU-only step on a GPU run); the parameter count is the CPU build's."""

from __future__ import annotations

import argparse

import pytest
import torch

from milabench import classifiers, helpers, llama


def llm() -> torch.nn.Module:
    parser = argparse.ArgumentParser()
    llama.add_arguments(parser)
    args = parser.parse_args(
        "--hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 176 --vocab 512 "
        "--seq-len 64".split()
    )
    return llama.build(args)


def bert() -> torch.nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(
        BertConfig(
            vocab_size=512,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=256,
            attn_implementation="sdpa",
        )  # fmt: skip
    )


def diffusion() -> torch.nn.Module:
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), block_out_channels=(32, 64),
        layers_per_block=1, cross_attention_dim=32, attention_head_dim=4, norm_num_groups=8,
    )  # fmt: skip


def vit() -> torch.nn.Module:
    import timm

    return timm.create_model("vit_base_patch16_224", pretrained=False, img_size=32,
                             patch_size=8, embed_dim=64, depth=2, num_heads=2)  # fmt: skip


def legacy(module: str, build: str, *args: object) -> object:
    def make() -> torch.nn.Module:
        return getattr(__import__(f"milabench.models.{module}", fromlist=[build]), build)(*args)

    return make


BUILDERS = {
    "llm": llm,
    "bert": bert,
    "diffusion": diffusion,
    "vit": vit,
    "resnet50": lambda: __import__("torchvision").models.resnet50(weights=None),
    "convnet": lambda: classifiers.build_model("resnet18", 1000),
    "atari": legacy("atari", "AtariCNN", 6),
    "dcgan.g": legacy("dcgan", "generator", 100, 64, 64),
    "dcgan.d": legacy("dcgan", "discriminator", 64, 64),
    "fast_style": legacy("fast_style", "transformer_net"),
    "fast_style.vgg": legacy("fast_style", "VGGFeatures"),
    "minigrid": legacy("minigrid", "FiLMActorCritic", 7),
    "recom": legacy("recom", "NeuMF", 100, 200, 8, [64, 32, 16, 8]),
    "reso": legacy("reso", "SubPixelCNN", 3),
    "sine_wave": legacy("sine_wave", "Sequence", 51),
    "ssd": legacy("ssd", "SSD300"),
    "vae": legacy("vae", "VAE"),
    "wlm": legacy("wlm", "RNNModel", "LSTM", 1000, 64, 64, 2),
    "translator": legacy("translator", "GNMT", 1000, 64, 2),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_each_model_is_made_on_the_device_it_trains_on(name):
    torch.manual_seed(0)
    on_cpu = BUILDERS[name]()
    with helpers.built_on("meta"):
        on_meta = BUILDERS[name]()
    tensors = [*on_meta.parameters(), *on_meta.buffers()]
    assert tensors and all(t.device.type == "meta" for t in tensors), name
    count = sum(p.numel() for p in on_cpu.parameters())
    assert sum(p.numel() for p in on_meta.parameters()) == count
