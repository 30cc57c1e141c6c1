"""What the inference tests share (llm-decode, llm-serve, vllm-offline): the Llama shapes
shipped in milabench/configs (random weights, never a download), the bytes a decode step
reads, and the figures every inference result records.

A shape is a name (``tiny``, ``1b``, ``8b``: ``milabench/configs/llama-<name>.json``) or the
path of a ``config.json``; its ``_comment`` says which published model it copies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milarun.experiment import BadTestArguments

CONFIGS = Path(__file__).parent / "configs"
SHAPES = tuple(sorted(p.stem.removeprefix("llama-") for p in CONFIGS.glob("llama-*.json")))
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}
# MLPerf Inference's server-scenario limits for Llama-3.1-8B (v5.1 rules): time to first
# token and time per output token; the interactive scenario's are 0.5 s and 30 ms.
MLPERF_TTFT_S = 2.0
MLPERF_TPOT_S = 0.100


def config_path(shape: str) -> Path:
    """The config.json of a shape name or path; BadTestArguments naming the shipped ones."""
    path = CONFIGS / f"llama-{shape}.json" if shape in SHAPES else Path(shape)
    if not path.is_file():
        raise BadTestArguments(
            f"bad test argument: --model {shape!r}: no such shape (shipped: "
            f"{', '.join(SHAPES)}) nor config file"
        )
    return path


def config_dict(shape: str) -> dict[str, Any]:
    """The shape's configuration as a dict (without its ``_comment``)."""
    path = config_path(shape)
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise BadTestArguments(
            f"bad test argument: --model {path}: not a JSON config ({err})"
        ) from None
    if not isinstance(found, dict) or found.get("model_type") != "llama":
        raise BadTestArguments(f"bad test argument: --model {path}: not a Llama config.json")
    found.pop("_comment", None)
    return found


def llama_config(shape: str, max_len: int) -> Any:
    """transformers' LlamaConfig of the shape, SDPA attention, room for ``max_len`` tokens."""
    from transformers import LlamaConfig

    values = config_dict(shape)
    values["max_position_embeddings"] = max(int(values["max_position_embeddings"]), max_len)
    return LlamaConfig(**values, attn_implementation="sdpa")


def build(config: Any, device: Any, dtype: Any) -> Any:
    """LlamaForCausalLM from ``config``, its random weights made on ``device`` in ``dtype``
    (no fp32 copy first: an 8B model in fp32 is 32 GB), in eval mode."""
    import torch
    from transformers import LlamaForCausalLM

    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(before)
    return model.eval()


@dataclass(frozen=True)
class Shape:
    """The sizes a decode step's bytes depend on."""

    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    parameters: int  # all of them, the input embedding included
    tied: bool

    @classmethod
    def of(cls, config: Any, parameters: int) -> Shape:
        head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // config.num_attention_heads
        )
        return cls(
            config.num_hidden_layers,
            config.num_key_value_heads,
            head_dim,
            config.hidden_size,
            config.vocab_size,
            parameters,
            bool(config.tie_word_embeddings),
        )

    def weight_bytes(self, dtype_bytes: int, batch: int) -> float:
        """Weights one decode step reads: every matrix once, except the input embedding,
        of which only the ``batch`` rows looked up (unless tied to the output layer, which
        reads it whole)."""
        embedding = self.vocab * self.hidden
        read = self.parameters - (0 if self.tied else embedding - batch * self.hidden)
        return float(read * dtype_bytes)

    def kv_bytes(self, dtype_bytes: int, batch: int, context: float) -> float:
        """Keys and values one decode step reads: every layer's, over ``context`` tokens."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * context * batch * dtype_bytes

    def step_bytes(self, dtype_bytes: int, batch: int, context: float) -> float:
        return self.weight_bytes(dtype_bytes, batch) + self.kv_bytes(dtype_bytes, batch, context)

    def decode_flops(self, context: float) -> float:
        """FLOPs per generated token: 2 per weight (the input embedding is a lookup) and
        4 L d_kv s for attention over ``context`` tokens (scores and weighted sum)."""
        weights = self.parameters - (0 if self.tied else self.vocab * self.hidden)
        heads_width = self.hidden  # queries span every head: d
        return 2.0 * weights + 4.0 * self.layers * heads_width * context


def token_ids(vocab: int, batch: int, length: int, seed: int, device: Any) -> Any:
    """A (batch, length) tensor of random token ids, avoiding the first 3 (special) ids."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(3, vocab, (batch, length), generator=gen, device=device)


def rate_of(log: Any) -> float | None:
    """The steady rate, else (a run too short for a window) examples over in-block time
    after the warm-up block."""
    rate = log.steady_rate()
    measured = log.in_block - log.warmup_time
    if rate is None and log.rates and measured > 0:
        widths = [log.slice_duration] * len(log.rates)
        if log.last_slice is not None:
            widths[-1] = log.last_slice
        rate = sum(r * w for r, w in zip(log.rates, widths)) / measured
    return rate


def bandwidth(device: Any) -> tuple[str, float | None]:
    """The device's name and datasheet memory bandwidth in bytes/s (None: unknown)."""
    from milarun.machine.gpu import datasheet
    from milarun.measure import efficiency

    name = efficiency.device_name(device)
    memory = None
    if getattr(device, "type", None) == "cuda":
        import torch

        memory = torch.cuda.get_device_properties(device).total_memory
    return name, datasheet.memory_bandwidth(name, memory)


def decode_efficiency(exp: Any, shape: Shape, args: Any, rate: float | None, settings: Any) -> Any:
    """The efficiency record of the headline batch: FLOPs per generated token at the
    cycle's mean context (2 per weight + attention), against the datasheet peak."""
    import dataclasses

    from milarun.measure import efficiency

    context = args.input_len + args.output_len / 2.0
    formula = efficiency.Formula(
        shape.decode_flops(context),
        args.precision,
        "formula: 2N + 4 L d s per generated token, s the mean context of a cycle",
    )
    record = efficiency.from_formula(
        formula, args.batch_size, rate, efficiency.device_name(exp.device)
    )
    return dataclasses.replace(
        record, settings={**efficiency.precision_settings(exp.device), **settings}
    )
