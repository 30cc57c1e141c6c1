"""Running a model test through the real CLI, and reading what it wrote (shared by tests)."""

from __future__ import annotations

import atexit
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import clifork
from conftest import ROOT, cli_env
from milarun.run.warm import Refused, WarmPool

TIMEOUT = 600.0
_pool: WarmPool | None = None


def _warm_pool() -> WarmPool:
    """This test process's warm processes, as `jobs` keeps them (one per environment)."""
    global _pool
    if _pool is None:
        _pool = WarmPool(Path(tempfile.mkdtemp(prefix="milarun-test-warm-")), os.getpid())
        atexit.register(_pool.close)
    return _pool


def run_model(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``milarun ...`` on the CPU with one torch thread (``env``: more variables). A ``run``
    is forked from a warm process that imported torch once, as `jobs` starts its instances
    (the same child: its own session, environment and log; 1.5-2 s of CPU less a run); any
    other command is forked from the tests' CLI server (tests/clifork.py), a run the warm
    process refuses starts cold. A forked run's output is
    its log, all of it in ``stdout``."""
    words = [str(a) for a in args]
    full_env = cli_env(
        {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **(env or {})},
        benches=False,
        keep_pythonpath=True,
    )
    if words[0] == "run" and ":" in words[1]:
        forked = _forked(words, full_env)
        if forked is not None:
            return forked
    warm = clifork.run(words, ROOT, full_env, TIMEOUT)  # the other commands: the CLI warm
    if warm is not None:
        return warm
    return subprocess.run(
        [sys.executable, "-m", "milarun", *words],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=full_env,
    )


def _forked(words: list[str], env: dict[str, str]) -> subprocess.CompletedProcess | None:
    log = Path(tempfile.mkstemp(prefix="milarun-run-", suffix=".log")[1])
    try:
        child, _ = _warm_pool().fork(
            words, words[1].split(":")[0], env, log, 1 << 30, [], [], 120.0, lambda: False, ROOT
        )
    except Refused:
        log.unlink(missing_ok=True)
        return None
    try:
        code = child.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        child.kill()
        raise
    output = log.read_text(errors="replace")
    log.unlink()
    return subprocess.CompletedProcess(["milarun", *words], code, output, "")


def describe(done: subprocess.CompletedProcess) -> str:
    """The end of a process's output, for assertion messages."""
    return f"rc={done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"


def only_result(out: Path) -> dict:
    (path,) = sorted(Path(out).glob("*.json"))
    return json.loads(path.read_text())


def tree_bytes(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` by relative path (to compare generated data)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(Path(folder).rglob("*"))
        if p.is_file()
    }


def run_without_data(model: str, tmp_path: Path, *argv: object) -> dict:
    """Run a model on an empty data folder: it must fail at once, recording a failure whose
    message names the `milarun dataset` command that makes the data. Returns the result."""
    out = Path(tmp_path) / "out"
    done = run_model(
        "run",
        f"milabench.models.{model}:main",
        "-o",
        out,
        "-d",
        Path(tmp_path) / "empty",
        "--",
        *(argv or ("--min-slices", "6")),
    )
    assert done.returncode == 1, describe(done)
    result = only_result(out)
    assert result["success"] is False
    assert result["failure"]["kind"] == "exception"
    assert "DataMissing" in result["failure"]["message"]
    assert "milarun dataset" in result["failure"]["message"]
    return result


def run_trained(
    model: str,
    dataroot: Path | None,
    tmp_path: Path,
    args: list[str],
    metrics: tuple[str, ...] = ("loss",),
    env: dict[str, str] | None = None,
    synthetic: bool | None = True,
) -> dict:
    """Train a model through the CLI (on the data in ``dataroot``; None: a test without
    data): a successful result recording ``synthetic`` as its synthetic_data, with finite
    ``metrics``, and at least --min-slices rate slices (the run's length is measured, so it
    holds on any machine). Returns the result."""
    out = Path(tmp_path) / "out"
    data = () if dataroot is None else ("-d", dataroot)
    done = run_model(
        "run", f"milabench.models.{model}:main", "-o", out, *data, "--", *args, env=env
    )
    assert done.returncode == 0, describe(done)
    result = only_result(out)
    assert result["success"], result["error"]
    assert result["synthetic_data"] is synthetic
    for name in metrics:
        value = result["metrics"][name]
        assert value is not None and math.isfinite(value), (name, result["metrics"])
    train = result["timings"]["train"]
    assert train["count"] > 0
    assert len(train["rates"]) >= int(args[args.index("--min-slices") + 1]), train["rates"]
    return result


def assert_rejected(model: str, argv: list[str], message: str, dataroot: Path | str = ".") -> None:
    """``milabench.models.<model>.main`` refuses ``argv``, in this process and on the CPU,
    with a one-line "bad test argument" BadTestArguments that contains ``message``."""
    import importlib

    import pytest
    import torch

    from milarun.measure.experiment import BadTestArguments, Experiment

    main = importlib.import_module(f"milabench.models.{model}").main
    exp = Experiment(model, dataroot=dataroot, device=torch.device("cpu"))
    with pytest.raises(BadTestArguments) as refused:
        main(exp, argv)
    text = str(refused.value)
    assert text.startswith("bad test argument") and message in text and "\n" not in text, text
