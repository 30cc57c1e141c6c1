"""What a bid must say to be reproduced: the code, its lock, the installed packages, the
container image, and the versions and firmware of the GPU stack (``milarun package`` keeps
it beside the run; ``jobs`` keeps it in the run folder at its start).

Everything is read, nothing is imported or run but ``git`` (bounded) and the device
backend (NVML, AMD SMI): a package list from the installed distributions' metadata, the
collective library's version as the backend reads it (NCCL's wheel, the ROCm install's
RCCL), InfiniBand from
``/sys/class/infiniband``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from milarun.machine import gpu

ROOT = Path(__file__).resolve().parents[2]  # a source checkout's top (pyproject, uv.lock)
# Environment variables that name the container image a run used (Docker/Podman users set
# one of these; Kubernetes, Pyxis/enroot and Apptainer set theirs).
IMAGE_VARIABLES = (
    "MILARUN_IMAGE_DIGEST",
    "CONTAINER_IMAGE_DIGEST",
    "IMAGE_DIGEST",
    "SINGULARITY_CONTAINER",
    "APPTAINER_CONTAINER",
    "ENROOT_ROOTFS",
    "NVIDIA_PYTORCH_VERSION",
)
INFINIBAND = Path("/sys/class/infiniband")
MAX_DEVICES = 64  # InfiniBand adapters read: more is no machine


def sha256_file(path: Path) -> str | None:
    """The SHA-256 of a file, read in chunks; None when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def git_commit(root: Path = ROOT) -> dict[str, Any] | None:
    """The commit of a source checkout and whether its files differ from it; None when
    milarun is not run from a git checkout (an installed wheel)."""
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return {"commit": head.stdout.strip(), "modified": bool(dirty.stdout.strip())}


def installed_packages() -> dict[str, str]:
    """name -> version of every distribution installed beside milarun."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[name.lower()] = dist.version
    return dict(sorted(found.items()))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()[:200] or None
    except OSError:
        return None


def infiniband(root: Path = INFINIBAND) -> list[dict[str, Any]]:
    """Each InfiniBand adapter's name, firmware and board (empty without any)."""
    try:
        names = sorted(os.listdir(root))[:MAX_DEVICES]
    except OSError:
        return []
    return [
        {
            "device": name,
            "fw_ver": _read(root / name / "fw_ver"),
            "board_id": _read(root / name / "board_id"),
            "hca_type": _read(root / name / "hca_type"),
        }
        for name in names
    ]


def gpu_firmware(backend: gpu.Backend | None = None) -> dict[str, Any]:
    """Driver version and, per GPU, its name, UUID and VBIOS version (the backend's)."""
    if backend is None:
        backend = gpu.load()
    if not backend.usable:
        return {"driver": None, "gpus": [], "note": backend.reason}
    try:
        gpus = [
            {"index": g.index, "name": g.name, "uuid": g.uuid, "vbios": backend.firmware(g.handle)}
            for g in backend.gpus()
        ]
        return {"driver": backend.driver(), "gpus": gpus}
    except Exception as err:  # any library error: said, never fatal
        return {"driver": None, "gpus": [], "note": f"{backend.label} query failed: {err}"}


def container_image(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that name the container image, where set."""
    env = os.environ if environ is None else environ
    return {k: env[k][:500] for k in IMAGE_VARIABLES if env.get(k)}


def record(backend: gpu.Backend | None = None) -> dict[str, Any]:
    """The reproducibility record of this install and machine; ``nccl``: the version of
    the collective library the backend names (``collective``: NCCL, RCCL), as it reads it."""
    lock = ROOT / "uv.lock"
    if backend is None:
        backend = gpu.load()
    collective = backend.tools.collective
    return {
        "git": git_commit(),
        "uv_lock_sha256": sha256_file(lock) if lock.is_file() else None,
        "packages": installed_packages(),
        "container_image": container_image(),
        "nccl": backend.collective_version(),
        "collective": collective,
        "gpu_firmware": gpu_firmware(backend),
        "infiniband": infiniband(),
    }
