"""Issue 49: the CPU-only route of docs/install.md never turns into the CUDA install
silently. scripts/install-cpu.sh stops with one line, and leaves no environment, when the CPU
index cannot be reached (it quietly took PyPI's CUDA torch); an environment it marked CPU-only
whose torch is not the CPU build is said by every command and FAILed by doctor."""

from __future__ import annotations

import socket
import subprocess

from conftest import ROOT, cli_env
from milarun.machine import torchbuild

SCRIPT = ROOT / "scripts" / "install-cpu.sh"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed once we leave: connections refused


def test_an_unreachable_cpu_index_stops_the_install_and_leaves_nothing(tmp_path):
    venv = tmp_path / "cpu-venv"
    env = cli_env(
        {
            "MILARUN_CPU_VENV": str(venv),
            "MILARUN_CPU_INDEX": f"http://127.0.0.1:{closed_port()}/whl/cpu",
            "UV_HTTP_RETRIES": "0",
        }
    )
    done = subprocess.run(
        ["bash", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("install-cpu: error: cannot install torch from the CPU index"), last
    assert "no fallback to PyPI's CUDA build" in last
    assert not venv.exists()  # nothing half-installed, no CUDA torch


def test_the_script_refuses_an_environment_it_did_not_make(tmp_path):
    (tmp_path / "full").mkdir()
    env = cli_env({"MILARUN_CPU_VENV": str(tmp_path / "full")})
    done = subprocess.run(
        ["bash", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "is not a CPU-only environment" in done.stderr
    assert (tmp_path / "full").is_dir()


def test_a_cpu_only_environment_with_a_cuda_torch_is_said(tmp_path):
    """This checkout's own torch (uv.lock's, PyPI's CUDA build) in an environment marked
    CPU-only: the problem a `uv run` after install-cpu.sh makes."""
    version = torchbuild.torch_version()
    assert version is not None and not version.endswith("+cpu")
    assert torchbuild.cpu_only_problem(tmp_path) is None  # not marked: nothing to say
    (tmp_path / torchbuild.MARKER).touch()
    problem = torchbuild.cpu_only_problem(tmp_path)
    assert problem is not None and f"torch {version}, not the CPU build" in problem
    assert "scripts/install-cpu.sh again" in problem and "--no-sync" in problem
