"""vllm-offline: vLLM's offline engine (``LLM``) generating as fast as it can: output tokens/s.

The MLPerf Offline scenario's measure with vLLM: the engine is kept full (twice
``--concurrency`` requests in it, its ``max_num_seqs``), each request ``--input-len`` random
token ids asking for exactly ``--output-len`` tokens (EOS ignored), prefix caching off,
random weights (``load_format="dummy"``) of a Llama shape of milabench/configs. One example
is one output token; one block of the rate log is one engine step. vLLM runs in its own
environment (scripts/vllm-env.sh, found at $MILARUN_VLLM_ENV, default .venv-vllm), as a child
process killed with its group at the end; where that environment is missing the result is
one ``unavailable`` line saying how to create it. Inference suite: no 2020 counterpart.
"""

from __future__ import annotations

import argparse
from typing import Any

from milabench import engines, helpers, inference, offline
from milarun.experiment import Experiment


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="8b", help=f"shape: {', '.join(inference.SHAPES)}")
    parser.add_argument("--precision", default="bf16", choices=("bf16", "fp16", "fp32"))
    parser.add_argument("--kv-dtype", default="auto", help="vLLM's kv_cache_dtype (fp8...)")
    parser.add_argument("--input-len", type=helpers.positive_int, default=1024)
    parser.add_argument("--output-len", type=helpers.positive_int, default=256)
    parser.add_argument(
        "--concurrency", type=helpers.positive_int, default=256, help="vLLM's max_num_seqs"
    )
    parser.add_argument("--cuda-graphs", action="store_true", help="else enforce_eager")
    parser.add_argument("--startup-timeout", type=float, default=900.0)
    parser.add_argument("--request-timeout", type=float, default=120.0, help="per engine step")
    args = exp.parse_args(parser, argv)
    helpers.reject(
        [
            f"--{n.replace('_', '-')} {getattr(args, n)} (> 0)"
            for n in ("startup_timeout", "request_timeout")
            if not getattr(args, n) > 0
        ]
    )
    inference.config_path(args.model)
    import torch

    helpers.setup(exp, args, device=torch.device("cpu"))  # vLLM's process owns the GPU
    exp.synthetic_data = True
    exp.arguments["workload"] = (
        f"a {args.model} Llama in vLLM's offline engine, {args.input_len} tokens in, "
        f"{args.output_len} out, {args.concurrency} sequences"
    )
    settings: dict[str, Any] = {"engine": "vllm-offline", "precision": args.precision}
    log = exp.rate_log("train")
    try:
        settings = offline.run_offline(args, log, exp.side_dir / "vllm.log")
    finally:
        engines.record_settings(exp, settings)
