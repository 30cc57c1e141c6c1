"""What a bid must say to be reproduced: the code, its lock, the installed packages, the
container image, and the versions and firmware of the GPU stack (``milarun package`` keeps
it beside the run; ``jobs`` keeps it in the run folder at its start).

Everything is read, nothing is imported or run but ``git`` (bounded) and the device
backend (NVML, AMD SMI): a package list from the installed distributions' metadata, NCCL
from its wheel (RCCL, on AMD, from the ROCm install's header), InfiniBand from
``/sys/class/infiniband``.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
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


def nccl_version(collective: str = "NCCL", rocm: Path | None = None) -> str | None:
    """The version of the collective library torch's GPU backend loads: NCCL's from its
    wheel (torch loads the one of nvidia-nccl-cu*); RCCL's (``collective`` "RCCL", on AMD)
    from torch where this process imported it (torch.cuda.nccl.version() gives RCCL's on a
    ROCm build), else from the ROCm install's rccl.h. RCCL numbers its versions by the
    NCCL API it implements (2.21.5), so both read alike."""
    if collective != "RCCL":
        for dist in metadata.distributions():
            name = (dist.metadata["Name"] or "").lower()
            if name.startswith("nvidia-nccl"):
                return dist.version
        return None
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch.version, "hip", None):
        try:
            return ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # a build without RCCL: the header's, if any
            pass
    return rccl_header_version(rocm)


def rccl_header_version(rocm: Path | None = None) -> str | None:
    """``NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH`` of the ROCm install's rccl.h (``rocm``, else
    $ROCM_PATH, else /opt/rocm); None where there is none."""
    root = rocm or Path(os.environ.get("ROCM_PATH") or "/opt/rocm")
    for header in (root / "include" / "rccl" / "rccl.h", root / "include" / "rccl.h"):
        try:
            with open(header, encoding="utf-8", errors="replace") as f:
                text = f.read(200_000)  # the defines are near its top
        except OSError:
            continue
        parts = [
            re.search(rf"^#define\s+NCCL_{part}\s+(\d+)\s*$", text, re.MULTILINE)
            for part in ("MAJOR", "MINOR", "PATCH")
        ]
        if all(parts):
            return ".".join(m.group(1) for m in parts if m)
    return None


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
    the collective library that ``collective`` names (NCCL, or RCCL on AMD)."""
    lock = ROOT / "uv.lock"
    if backend is None:
        backend = gpu.load()
    collective = backend.tools.collective
    return {
        "git": git_commit(),
        "uv_lock_sha256": sha256_file(lock) if lock.is_file() else None,
        "packages": installed_packages(),
        "container_image": container_image(),
        "nccl": nccl_version(collective),
        "collective": collective,
        "gpu_firmware": gpu_firmware(backend),
        "infiniband": infiniband(),
    }
