"""The isolation an instance really got, read from inside its own process: its cgroups,
the CPUs of its affinity mask, the memory limit in force, torch's thread count, and whether
its file reads bypass the page cache (nocache)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from milarun.machine.isolation import CGROUP_ROOT, limit_up, own_cgroups
from milarun.results.records import Isolation


def memory_limit(groups: dict[str, str], root: Path = CGROUP_ROOT) -> int | None:
    """Memory limit in force for a process in these groups (None = unlimited/unknown)."""
    v1 = next((p for c, p in groups.items() if "memory" in c.split(",")), None)
    if v1 is not None:
        return limit_up(root / "memory", v1, "memory.limit_in_bytes")
    if "" in groups:
        return limit_up(root, groups[""], "memory.max")
    return None


def nocache_loaded(maps: str | None = None, environ: Any = None) -> bool:
    """Whether nocache's library is loaded in this process: the legacy profiles ran every
    test under ``nocache`` (their ``exec_prefix``), which preloads it so that the pages a
    process reads leave the page cache, and every epoch reads its data from the disk again.
    Read from ``/proc/self/maps`` (``maps``: its text), else from LD_PRELOAD."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            env = os.environ if environ is None else environ
            maps = "\n".join(env.get("LD_PRELOAD", "").replace(":", " ").split())
    for line in maps.splitlines():
        name = line.split()[-1].rsplit("/", 1)[-1] if line.split() else ""
        if name.startswith("nocache") and ".so" in name:
            return True
    return False


def isolation_record() -> Isolation:
    """The isolation this process really has, read from inside it."""
    groups = own_cgroups()
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    torch = sys.modules.get("torch")
    return Isolation(
        cgroups=groups,
        cpus=tuple(cpus),
        memory_limit=memory_limit(groups),
        torch_threads=torch.get_num_threads() if torch is not None else None,
        requested=os.environ.get("MILARUN_CGROUP") or None,
        nocache=nocache_loaded(),
    )
