"""Which torch build this environment has, read from its package metadata (torch is not
imported): an environment made by scripts/install-cpu.sh (the CPU-only route of
docs/install.md) is marked so, and a CUDA torch found in it later means a `uv run` or `uv sync`
replaced the CPU build with uv.lock's (PyPI's CUDA build, a few GB): said, never silent."""

from __future__ import annotations

import sys
from pathlib import Path

MARKER = "milarun-cpu-only"  # in the environment's folder (sys.prefix): scripts/install-cpu.sh
CPU_TAG = "+cpu"  # the local version of PyTorch's CPU wheels: 2.5.1+cpu


def torch_version() -> str | None:
    """The installed torch's version (None: not installed)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def cpu_only_problem(prefix: str | Path = sys.prefix) -> str | None:
    """What is wrong with a CPU-only environment's torch (None: not a CPU-only environment,
    or its torch is the CPU build)."""
    if not (Path(prefix) / MARKER).is_file():
        return None
    version = torch_version()
    if version is not None and version.endswith(CPU_TAG):
        return None
    found = "no torch" if version is None else f"torch {version}, not the CPU build"
    return (
        f"this environment ({prefix}) was installed CPU-only by scripts/install-cpu.sh, but has "
        f"{found} (a `uv run` or `uv sync` syncs it to uv.lock: PyPI's CUDA build): run "
        "scripts/install-cpu.sh again, then .venv/bin/milarun or `uv run --no-sync milarun`"
    )
