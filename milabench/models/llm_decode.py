"""llm-decode: generation with a Llama-shaped model: prefill and decode tokens/s, time per
output token and the model-bandwidth utilisation (MBU), the decode analogue of MFU.

transformers' LlamaForCausalLM from a shape shipped in milabench/configs (``--model``: tiny,
1b = Llama 3.2 1B, 8b = Llama 3.1 8B; random weights made on the device in ``--precision``,
never a download), SDPA attention, a static KV cache of ``--input-len`` + ``--output-len``
tokens, greedy next tokens fed back on the device. One cycle: a prefill of ``--batch-size``
random prompts of ``--input-len`` tokens (timed and synced on its own), then
``--output-len`` - 1 decode steps (one block each of the ``train`` rate log: one example is
one generated token, ``--batch-size`` a step); the cache is reset and the next cycle starts.
EOS is never looked for: every sequence runs its full length.

After the headline batch, each ``--sweep`` batch size runs ``--sweep-slices`` slices of its
own (``decode_b<N>`` rate logs; its prefills are the ``prefill_b<N>`` timer). Metrics
per batch size N:
``decode_tokens_per_s_b<N>``, ``prefill_tokens_per_s_b<N>``, ``tpot_ms_b<N>`` (one decode
step: the time between two tokens of one sequence), ``prefill_ms_b<N>`` (the prefill of the
batch: the time to its first token), ``step_bytes_b<N>`` (weights read once a step plus the
KV cache at the cycle's mean context) and ``mbu_percent_b<N>`` (bytes x steps/s over the
datasheet's memory bandwidth; absent where the device has no datasheet row, as on a CPU).
Inference suite: no 2020 counterpart.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

from milabench import helpers, inference, modern
from milarun.experiment import Experiment

PRECISIONS = ("bf16", "fp16", "fp32")


def batch_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: batch sizes, e.g. 1,8,32") from err
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: batch sizes >= 1")
    return values


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="8b", help=f"shape: {', '.join(inference.SHAPES)}")
    parser.add_argument("--precision", default="bf16", choices=PRECISIONS)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=1)
    parser.add_argument("--sweep", type=batch_list, default=[], help="more batch sizes: 8,32")
    parser.add_argument("--sweep-slices", type=helpers.positive_int, default=6)
    parser.add_argument("--input-len", type=helpers.positive_int, default=1024)
    parser.add_argument("--output-len", type=helpers.positive_int, default=256)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the decode step (mode reduce-overhead: CUDA graphs on a GPU); "
        "compiling is warm-up, out of the rate",
    )


class Decoder:
    """One batch size's static cache, prompts and timed prefill/decode cycles."""

    def __init__(self, exp: Experiment, model: Any, args: Any, batch: int, step: Any):
        import torch
        from transformers import StaticCache

        self.exp, self.model, self.batch, self.step = exp, model, batch, step
        self.input_len, self.output_len = args.input_len, args.output_len
        total = args.input_len + args.output_len
        self.cache = StaticCache(config=model.config, max_cache_len=total)
        self.prompts = inference.token_ids(
            model.config.vocab_size, batch, args.input_len, args.seed + batch, exp.device
        )
        self.prefill_positions = torch.arange(args.input_len, device=exp.device)
        self.prefill_seconds: list[float] = []
        self.positions = [
            torch.tensor([p], device=exp.device) for p in range(args.input_len, total)
        ]

    def prefill(self) -> Any:
        import torch

        with torch.no_grad():
            self.cache.reset()
            out = self.model(
                input_ids=self.prompts,
                past_key_values=self.cache,
                cache_position=self.prefill_positions,
                use_cache=True,
                logits_to_keep=1,
            )
        return out.logits[:, -1].argmax(-1, keepdim=True)

    def run(self, decode: Any, done: Any) -> None:
        """Cycles of one prefill (timed on its own, synced: ``prefill_seconds``) and
        ``output_len`` - 1 decode blocks of the ``decode`` rate log until ``done()``."""
        timer = self.exp.time(f"prefill_b{self.batch}")
        while not done():
            with timer:
                start = time.perf_counter()
                tokens = self.prefill()
                self.exp.sync()
                self.prefill_seconds.append(time.perf_counter() - start)
            for position in self.positions[:-1]:
                if done():
                    return
                with decode.block(self.batch):
                    tokens = self.step(tokens, position, self.cache)

    def prefill_rate(self) -> float | None:
        """Prompt tokens/s of the prefills after the first (which holds the warm-up)."""
        timed = self.prefill_seconds[1:] or self.prefill_seconds
        total = sum(timed)
        return self.batch * self.input_len * len(timed) / total if total > 0 else None


def make_step(model: Any, compile_it: bool) -> Any:
    import torch

    def step(tokens: Any, position: Any, cache: Any) -> Any:
        with torch.no_grad():
            out = model(
                input_ids=tokens, past_key_values=cache, cache_position=position, use_cache=True
            )
        return out.logits[:, -1].argmax(-1, keepdim=True)

    if not compile_it:
        return step
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=False)

    def graphed(tokens: Any, position: Any, cache: Any) -> Any:
        # A new CUDA-graph step each call; its output is copied out before the next
        # replay overwrites it (the tokens feed the next step).
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(tokens, position, cache).clone()

    return graphed


def record(
    exp: Experiment,
    shape: inference.Shape,
    args: Any,
    batch: int,
    decode: Any,
    prefill: float | None,
    peak_bandwidth: float | None,
) -> float | None:
    """The batch size's metrics; returns its decode tokens/s."""
    rate = inference.rate_of(decode)
    pre = prefill
    suffix = f"_b{batch}"
    context = args.input_len + args.output_len / 2.0
    step_bytes = shape.step_bytes(inference.DTYPE_BYTES[args.precision], batch, context)
    exp.metric("step_bytes" + suffix, step_bytes)
    if rate:
        exp.metric("decode_tokens_per_s" + suffix, rate)
        exp.metric("tpot_ms" + suffix, 1000.0 * batch / rate)
        if peak_bandwidth:
            exp.metric("mbu_percent" + suffix, 100.0 * step_bytes * rate / batch / peak_bandwidth)
    if pre:
        exp.metric("prefill_tokens_per_s" + suffix, pre)
        exp.metric("prefill_ms" + suffix, 1000.0 * batch * args.input_len / pre)
    return rate


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    arguments(parser)
    args = exp.parse_args(parser, argv)
    helpers.reject(
        [f"--output-len {args.output_len} (>= 2)"] * (args.output_len < 2)
        + [f"--sweep-slices {args.sweep_slices} (>= 5: a steady window)"] * (args.sweep_slices < 5)
    )
    device = helpers.setup(exp, args)
    exp.synthetic_data = True  # random prompts by construction
    import torch

    # transformers 5.2x prefers ``cache=`` to ``past_key_values=``; older ones know only
    # the second, which every 5.x still takes.
    warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    config = inference.llama_config(args.model, args.input_len + args.output_len)
    batches = [args.batch_size, *[b for b in args.sweep if b != args.batch_size]]
    workload = (
        f"a {args.model} Llama, {args.input_len} tokens in, {args.output_len} out, "
        f"batch {args.batch_size}"
    )
    exp.arguments["workload"] = workload
    name, peak_bandwidth = inference.bandwidth(device)
    with modern.fits(exp, workload, device):
        model = inference.build(config, device, dtype[args.precision])
        params = modern.parameters(model)
        shape = inference.Shape.of(config, params)
        step = make_step(model, args.compile)
        settings = settings_of(args, batches, params, name, peak_bandwidth)
        if args.compile:
            start = time.perf_counter()
            warm = Decoder(exp, model, args, args.batch_size, step)
            tokens = warm.prefill()
            for position in warm.positions[:3]:
                tokens = warm.step(tokens, position, warm.cache)
            exp.sync()
            settings["compile_seconds"] = round(time.perf_counter() - start, 3)
        rates = {}
        for batch in batches:
            head = batch == args.batch_size
            decode = exp.rate_log("train" if head else f"decode_b{batch}", sync_each_block=True)
            decoder = Decoder(exp, model, args, batch, step)
            slices = args.sweep_slices

            def enough(log: Any = decode, n: int = slices, head: bool = head) -> bool:
                return log.done if head else len(log.rates) >= n

            decoder.run(decode, enough)
            decode.finish()
            rates[batch] = record(
                exp, shape, args, batch, decode, decoder.prefill_rate(), peak_bandwidth
            )
            del decoder
    settings["decode_tokens_per_s"] = {str(b): r for b, r in rates.items()}
    exp.set_efficiency(
        inference.decode_efficiency(exp, shape, args, rates[args.batch_size], settings)
    )


def settings_of(
    args: Any, batches: list[int], params: int, device: str, peak_bandwidth: float | None
) -> dict[str, Any]:
    import transformers

    return {
        "engine": "transformers",
        "engine_version": transformers.__version__,
        "precision": args.precision,
        "kv_dtype": args.precision,
        "kv_cache": "static",
        "attention": "sdpa",
        "compile": bool(args.compile),
        "cuda_graphs": bool(args.compile),
        "model": args.model,
        "parameters": params,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "batch_size": args.batch_size,
        "batch_sizes": batches,
        "memory_bandwidth": peak_bandwidth,
        "bandwidth_device": device,
    }
