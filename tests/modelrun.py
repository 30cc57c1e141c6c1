"""Running a model test through the real CLI, and reading what it wrote (shared by tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_model(*args: object) -> subprocess.CompletedProcess:
    """``python -m milarun ...`` in a subprocess, on the CPU with one torch thread."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "milarun", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=env)


def describe(done: subprocess.CompletedProcess) -> str:
    """The end of a process's output, for assertion messages."""
    return f"rc={done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"


def only_result(out: Path) -> dict:
    (path,) = sorted(Path(out).glob("*.json"))
    return json.loads(path.read_text())


def tree_bytes(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` by relative path (to compare generated data)."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def run_without_data(model: str, tmp_path: Path, *argv: object) -> dict:
    """Run a model on an empty data folder: it must fail at once, recording a failure whose
    message names the `milarun dataset` command that makes the data. Returns the result."""
    out = Path(tmp_path) / "out"
    done = run_model("run", f"milabench.models.{model}:main", "-o", out,
                     "-d", Path(tmp_path) / "empty", "--", *(argv or ("--min-slices", "6")))
    assert done.returncode == 1, describe(done)
    result = only_result(out)
    assert result["success"] is False
    assert result["failure"]["kind"] == "exception"
    assert "DataMissing" in result["failure"]["message"]
    assert "milarun dataset" in result["failure"]["message"]
    return result


def run_trained(model: str, dataroot: Path, tmp_path: Path, args: list[str]) -> dict:
    """Train a model on synthetic data through the CLI: a successful result with a finite
    loss, and at least --min-slices rate slices (the run's length is measured, so it holds on
    any machine). Returns the result."""
    out = Path(tmp_path) / "out"
    done = run_model("run", f"milabench.models.{model}:main", "-o", out, "-d", dataroot,
                     "--", *args)
    assert done.returncode == 0, describe(done)
    result = only_result(out)
    assert result["success"], result["error"]
    assert result["synthetic_data"] is True
    loss = result["metrics"]["loss"]
    assert loss == loss and abs(loss) < float("inf")
    train = result["timings"]["train"]
    assert train["count"] > 0
    assert len(train["rates"]) >= int(args[args.index("--min-slices") + 1]), train["rates"]
    return result
