"""llm-serve: an OpenAI-compatible inference server under load: output tokens/s, TTFT, TPOT
and inter-token latency at p50 and p99, and the goodput within MLPerf's limits.

The test starts the engine (``--engine``: ``transformers`` serve by default, in milarun's
lock; ``vllm`` from its own environment, scripts/vllm-env.sh) on the instance's device and
a free loopback port, serving a Llama shape of milabench/configs with random weights
(``--model``), and kills it with its process group at the end. milarun's own streaming
client (milarun.measure.loadgen) sends ``--request-rate`` requests a second (0: closed
loop), at most ``--concurrency`` at once, each of ``--input-len`` distinct random tokens
asking for exactly ``--output-len`` tokens, EOS ignored. One example is one output token:
the rate log holds output tokens/s in 0.5 s slices, the ramp-up (until a first request has
finished) and the drain outside it.

Metrics: ``ttft_p50_ms``, ``ttft_p99_ms`` (time to first token, from when the request was
due, so queueing counts), ``tpot_p50_ms``, ``tpot_p99_ms`` (time per output token after the
first), ``itl_p50_ms``, ``itl_p99_ms`` (the gaps between tokens), ``goodput_percent`` (of
the requests within ``--ttft-limit`` 2 s and ``--tpot-limit`` 100 ms: MLPerf Inference's
server limits for Llama-3.1-8B), ``goodput_tokens_per_s``, ``requests``. A server that
never answers, answers errors, drops connections or streams garbage ends the run with a
``server`` failure naming the request and the fault; the metrics measured before it are
kept. Inference suite: no 2020 counterpart.
"""

from __future__ import annotations

import argparse
from typing import Any

from milabench import engines, helpers, inference
from milarun.experiment import Experiment, ServerFailed

PROMPTS = 64  # distinct prompts, cycled


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", default="transformers", choices=engines.ENGINES)
    parser.add_argument("--model", default="8b", help=f"shape: {', '.join(inference.SHAPES)}")
    parser.add_argument("--precision", default="bf16", choices=("bf16", "fp16", "fp32"))
    parser.add_argument("--kv-dtype", default="auto", help="vLLM's --kv-cache-dtype (fp8...)")
    parser.add_argument("--input-len", type=helpers.positive_int, default=1024)
    parser.add_argument("--output-len", type=helpers.positive_int, default=256)
    parser.add_argument("--concurrency", type=helpers.positive_int, default=8)
    parser.add_argument(
        "--request-rate", type=float, default=0.0, help="requests/s (0: closed loop)"
    )
    parser.add_argument("--ttft-limit", type=float, default=inference.MLPERF_TTFT_S)
    parser.add_argument("--tpot-limit", type=float, default=inference.MLPERF_TPOT_S)
    parser.add_argument("--startup-timeout", type=float, default=600.0)
    parser.add_argument("--request-timeout", type=float, default=120.0)
    parser.add_argument(
        "--kv-blocks", type=int, default=0, help="transformers: KV cache blocks of 32 tokens"
    )
    parser.add_argument("--cuda-graphs", action="store_true", help="let the engine use them")
    parser.add_argument(
        "--url",
        default=None,
        help="measure a server already running there instead of starting --engine (its "
        "requests ask for EOS ignored as vLLM and SGLang spell it)",
    )


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    arguments(parser)
    args = exp.parse_args(parser, argv)
    problems = [
        f"--{name.replace('_', '-')} {getattr(args, name)} (> 0)"
        for name in ("ttft_limit", "tpot_limit", "startup_timeout", "request_timeout")
        if not getattr(args, name) > 0
    ]
    problems += [f"--request-rate {args.request_rate} (>= 0)"] * (args.request_rate < 0)
    problems += [f"--kv-blocks {args.kv_blocks} (>= 0)"] * (args.kv_blocks < 0)
    helpers.reject(problems)
    inference.config_path(args.model)  # an unknown shape is a bad argument, now
    import torch

    # The client syncs nothing and opens no CUDA context: the server owns the device.
    target = exp.device
    helpers.setup(exp, args, device=torch.device("cpu"))
    server_device = "cuda:0" if getattr(target, "type", "cpu") == "cuda" else "cpu"
    exp.synthetic_data = True
    exp.arguments["workload"] = (
        f"a {args.model} Llama served by {args.engine}, {args.input_len} tokens in, "
        f"{args.output_len} out, concurrency {args.concurrency}, "
        + (f"{args.request_rate:g} requests/s" if args.request_rate else "closed loop")
    )
    log = exp.rate_log("train")
    outcome = None
    settings: dict[str, Any] = {}
    try:
        with engines.serve(args, exp.side_dir / "server.log", server_device) as server:
            settings = server.settings
            outcome = engines.measure(server, args, log, PROMPTS)
    except ServerFailed as err:
        outcome = err.detail
        raise
    finally:
        engines.record(exp, args, outcome, settings, server_device)
