"""vLLM's offline engine run from milarun's side: milabench.vllm_child in vLLM's own
environment (scripts/vllm-env.sh), its output tokens counted into the rate log one engine
step a block, the child killed with its process group at the end, always."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from milabench import inference
from milabench.engines import (
    REPO,
    Server,
    die_with_parent,
    prompts,
    stop,
    vllm_python,
    write_tokenizer,
)
from milarun.experiment import ServerFailed
from milarun.measure.ratelog import RateLog


def run_offline(args: Any, log: RateLog, server_log: Path) -> dict[str, Any]:
    """vLLM's offline engine (milabench.vllm_child) in vLLM's environment, its output tokens
    counted into ``log`` one engine step a block until the log has measured enough; the
    engine's settings. ServerFailed when it dies, stalls or prints garbage."""
    import selectors

    python = vllm_python()
    folder = Path(tempfile.mkdtemp(prefix="milarun-vllm-"))
    try:
        config = inference.llama_config(args.model, args.input_len + args.output_len)
        config.save_pretrained(folder)
        write_tokenizer(folder, config.vocab_size)
        settings = {
            "folder": str(folder),
            "dtype": {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[args.precision],
            "max_num_seqs": args.concurrency,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "cuda_graphs": bool(args.cuda_graphs),
            "kv_dtype": args.kv_dtype,
            "seed": args.seed,
            "prompts": prompts(config.vocab_size, 64, args.input_len, args.seed),
        }
        (folder / "milarun-offline.json").write_text(json.dumps(settings))
        argv = [str(python), "-m", "milabench.vllm_child", str(folder / "milarun-offline.json")]
        env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
        with open(server_log, "ab") as err:
            process = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        assert process.stdout is not None
        lines = selectors.DefaultSelector()
        lines.register(process.stdout, selectors.EVENT_READ)
        tail = Server("", process, server_log).tail

        def next_line(timeout: float, what: str) -> dict[str, Any]:
            if not lines.select(timeout):
                raise ServerFailed(f"vLLM printed no {what} within {timeout:g} s: {tail()}")
            line = process.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise ServerFailed(
                    f"vLLM exited (code {process.wait()}) before its {what}: {tail()}"
                )
            try:
                found = json.loads(line)
            except ValueError:
                raise ServerFailed(f"vLLM printed {line[:80]!r}, not its {what}") from None
            if not isinstance(found, dict):
                raise ServerFailed(f"vLLM printed {line[:80]!r}, not its {what}")
            return found

        try:
            ready = next_line(args.startup_timeout, "ready line")
            block = log.block(0)
            block.__enter__()
            while True:
                block.count = int(next_line(args.request_timeout, "engine step").get("tokens") or 0)
                block.__exit__(None, None, None)
                if log.done:
                    break
                block = log.block(0)
                block.__enter__()
            log.finish()
        finally:
            stop(process)
        return {
            "engine": "vllm-offline",
            "engine_version": ready.get("vllm"),
            "precision": args.precision,
            "kv_dtype": args.precision if args.kv_dtype == "auto" else args.kv_dtype,
            "cuda_graphs": bool(args.cuda_graphs),
            "max_sequences": args.concurrency,
            "concurrency": args.concurrency,
            "prefix_caching": False,
            "ignore_eos": True,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "model": args.model,
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)
