"""What the ROCm install tells without torch (the AMD backend's, milarun.machine.gpu.amd):
RCCL's version from its header, for a process that has not imported torch."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path


def rccl_version(rocm: Path | None = None) -> str | None:
    """RCCL's version: from torch where this process imported it (torch.cuda.nccl.version()
    gives RCCL's on a ROCm build), else from the ROCm install's rccl.h. RCCL numbers its
    versions by the NCCL API it implements (2.21.5), so NCCL's and RCCL's read alike."""
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
