"""The inference engines a test starts: an OpenAI-compatible server as a child process on a
free loopback port, in its own process group, killed with its group at the end, always.

- ``transformers``: ``transformers serve`` (in milarun's lock) on a model folder written
  for the run: the shape's config, random weights, and a word-level tokenizer whose token
  ``t<i>`` is id ``i``, so a prompt of N words is exactly N tokens. Continuous batching
  (paged attention) so that concurrent requests share the forward passes.
- ``vllm``: ``vllm serve`` from its own environment (scripts/vllm-env.sh), random weights
  with ``--load-format dummy``, prefix caching off, token-id prompts.

Both are asked for exactly ``--output-len`` tokens with EOS ignored. Where the engine is not
installed, EngineMissing says how to install it. The server's output goes to a log beside
the result (``<result>.files/server.log``): what it said is never lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milabench import inference
from milarun.experiment import EngineMissing, Experiment, ServerFailed
from milarun.measure import efficiency, loadgen
from milarun.measure.ratelog import RateLog

ENGINES = ("transformers", "vllm")
REPO = Path(__file__).resolve().parent.parent
VLLM_ENV_VARIABLE = "MILARUN_VLLM_ENV"
VLLM_ENV_DEFAULT = REPO / ".venv-vllm"
VLLM_HOWTO = "create it with scripts/vllm-env.sh (its own venv, vLLM's own torch)"
STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL of the server's group
# seconds between two "still waiting" lines while a server starts (a 1B/8B model is written,
# then loaded before the server binds its port: a minute or more, silent otherwise)
PROGRESS_EVERY = 15.0


def vllm_python() -> Path:
    """The Python of vLLM's own environment; EngineMissing where there is none."""
    root = Path(os.environ.get(VLLM_ENV_VARIABLE) or VLLM_ENV_DEFAULT)
    python = root / "bin" / "python"
    if not python.is_file():
        raise EngineMissing(f"vLLM is not installed at {root} ({VLLM_ENV_VARIABLE}): {VLLM_HOWTO}")
    return python


def die_with_parent() -> None:
    """In the engine's process before it runs (``preexec_fn``): Linux sends it SIGKILL when
    the test process dies, even by SIGKILL, which no ``finally`` outlives."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def transformers_serving() -> None:
    """EngineMissing unless ``transformers serve``'s own dependencies are importable here."""
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn", "openai") if importlib.util.find_spec(m) is None]
    if missing:
        raise EngineMissing(
            f"transformers serve needs {', '.join(missing)}, not installed for {sys.executable}: "
            "install transformers[serving] (milarun's lock has it: uv sync)"
        )


def loopback_port() -> int:
    """A port free on 127.0.0.1 now (the server binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_model_folder(folder: Path, shape: str, max_len: int, dtype: Any) -> dict[str, Any]:
    """The shape's config, random weights (made on the CPU) and the word-level tokenizer,
    saved for a server to load; returns the config as a dict."""
    config = inference.llama_config(shape, max_len)
    model = inference.build(config, "cpu", dtype)
    model.generation_config.eos_token_id = None  # EOS ignored: every request runs its length
    model.save_pretrained(folder)
    del model
    write_tokenizer(folder, config.vocab_size)
    return config.to_dict()


def write_tokenizer(folder: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, vocab)}}
    raw = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(folder)


def prompts(vocab: int, count: int, length: int, seed: int) -> list[list[int]]:
    """``count`` distinct prompts of ``length`` random token ids (no shared prefix, so no
    prefix cache can serve one from another)."""
    import random

    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(count)]


@dataclass
class Server:
    """A running engine: its URL, what a request adds to its body, its settings."""

    url: str
    process: subprocess.Popen | None  # None: a server someone else runs (--url)
    log: Path | None
    body: dict[str, Any] = field(default_factory=dict)
    token_prompts: bool = False  # prompts as token ids (vLLM) or as words (transformers)
    settings: dict[str, Any] = field(default_factory=dict)

    def tail(self, lines: int = 5) -> str:
        if self.log is None:
            return ""
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text[-lines:])[-600:]


def wait_ready(server: Server, timeout: float, every: float = PROGRESS_EVERY) -> None:
    """Until GET /health answers 200, saying every ``every`` s how long it has waited and the
    server's last log line; ServerFailed when the process exits or the time ends."""
    import httpx

    began = time.monotonic()
    deadline, said = began + timeout, began
    assert server.process is not None
    try:
        while time.monotonic() < deadline:
            code = server.process.poll()
            if code is not None:
                raise ServerFailed(
                    f"the server exited with code {code} before answering: {server.tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{server.url}/health", timeout=2.0).status_code == 200:
                    return
            if time.monotonic() - said >= every:
                said = time.monotonic()
                print(f"waiting for the server: {_waited(server, began, timeout)}", file=sys.stderr)
            time.sleep(0.25)
    except BaseException as stopped:  # a signal (the runner's Interrupted): where it stood
        if not isinstance(stopped, ServerFailed):
            said = _waited(server, began, timeout)
            print(f"stopped while waiting for the server: {said}", file=sys.stderr)
        raise
    raise ServerFailed(
        f"the server did not answer /health within {timeout:g} s (--startup-timeout); "
        f"its last log line: {server.tail(1) or '(none)'} (all of it: {server.log})"
    )


def _waited(server: Server, began: float, timeout: float) -> str:
    return (
        f"{time.monotonic() - began:.0f} s of {timeout:g} (--startup-timeout), "
        f"its last log line: {server.tail(1) or '(none yet)'}"
    )


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies waiting for a reaper do not)."""
    import psutil

    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
    return False


def stop(process: subprocess.Popen, grace: float = STOP_GRACE) -> None:
    """SIGTERM to the server's process group, SIGKILL to whatever of the group is left
    after ``grace`` seconds (a worker that ignores SIGTERM, one its leader left behind)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(grace)
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 5.0  # SIGKILL is delivered, not yet done, on return
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.02)


@contextlib.contextmanager
def started(
    argv: list[str], log: Path, env: dict[str, str], timeout: float, grace: float = STOP_GRACE
) -> Iterator[Server]:
    """The server ``argv`` (which binds the port in ``env["MILARUN_SERVE_PORT"]``) started in
    its own session, ready; stopped with its whole group when the block ends, however."""
    port = env["MILARUN_SERVE_PORT"]
    with open(log, "ab") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_ready(server, timeout)
        yield server
    finally:
        stop(process, grace)


def transformers_argv(folder: Path, port: int, args: Any, device: str) -> list[str]:
    argv = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(folder)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--device", device]
    argv += ["--dtype", {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[args.precision]]
    argv += ["--continuous-batching", "--log-level", "info"]
    if args.kv_blocks:
        argv += ["--cb-num-blocks", str(args.kv_blocks), "--cb-block-size", "32"]
    if args.cuda_graphs and device != "cpu":
        argv += ["--cb-use-cuda-graph"]
    return argv


def vllm_argv(python: Path, folder: Path, port: int, args: Any) -> list[str]:
    dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[args.precision]
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--load-format", "dummy"]
    argv += ["--dtype", dtype, "--max-num-seqs", str(args.concurrency)]
    argv += ["--max-model-len", str(args.input_len + args.output_len)]
    argv += ["--no-enable-prefix-caching"]
    if not args.cuda_graphs:
        argv += ["--enforce-eager"]
    if args.kv_dtype != "auto":
        argv += ["--kv-cache-dtype", args.kv_dtype]
    return argv


def version_in(python: Path, package: str) -> str | None:
    """The version of ``package`` installed for ``python`` (None: not installed)."""
    done = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.strip() if done.returncode == 0 else None


@contextlib.contextmanager
def serve(args: Any, log: Path, device: str) -> Iterator[Server]:
    """The engine of ``args.engine`` serving the shape ``args.model``, ready for requests."""
    if args.url:
        yield external(args)
        return
    import torch

    if args.engine == "transformers":
        transformers_serving()
    python = vllm_python() if args.engine == "vllm" else Path(sys.executable)
    folder = Path(tempfile.mkdtemp(prefix="milarun-serve-"))
    try:
        max_len = args.input_len + args.output_len
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
        if args.engine == "vllm":  # dummy weights: only the config and tokenizer are read
            config = inference.llama_config(args.model, max_len)
            config.save_pretrained(folder)
            write_tokenizer(folder, config.vocab_size)
        else:
            write_model_folder(folder, args.model, max_len, dtype[args.precision])
        port = loopback_port()
        env = {**os.environ, "MILARUN_SERVE_PORT": str(port), "HF_HUB_OFFLINE": "1"}
        if args.engine == "vllm":
            argv = vllm_argv(python, folder, port, args)
        else:
            argv = transformers_argv(folder, port, args, device)
        settings = engine_settings(args, python, argv)
        with started(argv, log, env, args.startup_timeout) as server:
            server.settings = settings
            server.token_prompts = args.engine == "vllm"
            ignore_eos = {"min_new_tokens": args.output_len, "max_new_tokens": args.output_len}
            server.body = (
                {"ignore_eos": True, "min_tokens": args.output_len, "return_token_ids": True}
                if args.engine == "vllm"
                else {"generation_config": json.dumps({**ignore_eos, "do_sample": False})}
            )
            yield server
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def external(args: Any) -> Server:
    """A server someone else started at ``args.url``: measured, never started or stopped."""
    if not args.url.startswith(("http://", "https://")):
        from milarun.experiment import BadTestArguments

        raise BadTestArguments(f"bad test argument: --url {args.url!r} (http://HOST:PORT)")
    return Server(
        args.url.rstrip("/"),
        None,
        None,
        body={"ignore_eos": True, "min_tokens": args.output_len},
        token_prompts=True,
        settings={"engine": "external", "engine_version": None, "url": args.url},
    )


def engine_settings(args: Any, python: Path, argv: list[str]) -> dict[str, Any]:
    """What the result records of the engine: name, version, and how it was run."""
    if args.engine == "vllm":
        version = version_in(python, "vllm")
    else:
        import transformers

        version = transformers.__version__
    return {
        "engine": args.engine,
        "engine_version": version,
        "precision": args.precision,
        "kv_dtype": args.precision if args.kv_dtype == "auto" else args.kv_dtype,
        "cuda_graphs": bool(args.cuda_graphs),
        "max_sequences": args.concurrency,
        "continuous_batching": True,
        "prefix_caching": False if args.engine == "vllm" else "n/a: distinct random prompts",
        "ignore_eos": True,
        "argv": argv[1:],
    }


def measure(server: Server, args: Any, log: RateLog, count: int) -> loadgen.Outcome:
    """The load of ``args`` against ``server`` (``count`` distinct prompts, cycled) until
    the rate log has measured enough."""
    vocab = int(inference.config_dict(args.model)["vocab_size"])
    ids = prompts(vocab, count, args.input_len, args.seed)
    load = loadgen.Load(
        server.url,
        list(ids) if server.token_prompts else [" ".join(f"t{i}" for i in p) for p in ids],
        args.output_len,
        args.concurrency,
        args.request_rate,
        args.request_timeout,
        server.body,
    )
    return loadgen.run_load(load, log, lambda rate_log: rate_log.done)


def record_settings(exp: Experiment, settings: dict[str, Any]) -> None:
    """The engine's settings as ``efficiency.settings`` (the comparison key reads them)."""
    exp.set_efficiency(
        efficiency.Efficiency(note="a server's work: no FLOP count", settings=settings)
    )


def record(exp: Experiment, args: Any, outcome: Any, settings: dict[str, Any], device: str) -> None:
    """The latency metrics (of what was measured, even before a failure) and the engine's
    settings (``efficiency.settings``: the comparison key reads them there)."""
    if isinstance(outcome, loadgen.Outcome):
        found = loadgen.latency_metrics(
            outcome.requests, args.ttft_limit, args.tpot_limit, outcome.span
        )
        for name, value in found.items():
            exp.metric(name, value)
    record_settings(
        exp,
        {
            **settings,
            "engine": settings.get("engine", args.engine),
            "precision": args.precision,
            "model": args.model,
            "device": device,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "concurrency": args.concurrency,
            "request_rate": args.request_rate,
            "ttft_limit_s": args.ttft_limit,
            "tpot_limit_s": args.tpot_limit,
        },
    )
