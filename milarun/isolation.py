"""Student isolation: what a profile asks for, and what an instance really got."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")


class IsolationError(RuntimeError):
    pass


def require_cgroup_support(suite: str, job: str, spec: str) -> None:
    """Refuse a profile's cgroup request: never fall back to an unisolated run silently."""
    raise IsolationError(
        f"job {suite}.{job} asks for cgroup '{spec}', but student cgroups are not "
        "supported by this milarun yet; pass --no-cgexec to run without isolation"
    )


def own_cgroups(proc_file: str = "/proc/self/cgroup") -> dict[str, str]:
    """controller(s) -> cgroup path of this process (``""`` key for the v2 hierarchy)."""
    groups: dict[str, str] = {}
    try:
        with open(proc_file, encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3:
                    groups[parts[1]] = parts[2]
    except OSError:
        pass
    return groups


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def memory_limit(groups: dict[str, str], root: Path = CGROUP_ROOT) -> int | None:
    """Memory limit in force for this process in bytes (None = unlimited / unknown).

    The smallest limit on the path from the process's group up to the root wins.
    """
    limits = []
    v1 = next((p for c, p in groups.items() if "memory" in c.split(",")), None)
    if v1 is not None:
        node = root / "memory" / v1.lstrip("/")
        while True:
            text = _read(node / "memory.limit_in_bytes")
            if text and text.isdigit() and int(text) < 2**62:
                limits.append(int(text))
            if node == root / "memory":
                break
            node = node.parent
    elif "" in groups:
        node = root / groups[""].lstrip("/")
        while node != root and root in node.parents:
            text = _read(node / "memory.max")
            if text and text.isdigit():
                limits.append(int(text))
            node = node.parent
    return min(limits) if limits else None


def isolation_record() -> dict[str, Any]:
    """The isolation this process really has, read from inside it."""
    groups = own_cgroups()
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    torch = sys.modules.get("torch")
    return {
        "cgroups": groups,
        "cpus": cpus,
        "memory_limit": memory_limit(groups),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "cgexec": os.environ.get("MILARUN_CGROUP") or None,
    }
