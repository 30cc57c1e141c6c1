"""Bring a node's results back from node-local disk, byte-exact.

A fleet run with ``--local-dir`` writes each node's results on that node's own disk (fast,
and no shared file system traffic while measuring); at the end of its task, each node copies
its folder into the shared ``<out>/nodes/<node>/``. Every file is compared by SHA-256 after
the copy; the local copy is removed only when all match, and a file already in the shared
folder is never overwritten.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from milarun import results


class GatherError(results.InputError):
    pass


@dataclass(frozen=True)
class Gathered:
    files: int
    bytes: int
    source: Path
    target: Path


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def gather(source: Path, target: Path, remove: bool = True) -> Gathered:
    """Copy every file under ``source`` into ``target`` (same relative paths), verify each
    by SHA-256, then remove ``source`` (``remove``)."""
    if not source.is_dir():
        raise GatherError(f"{source}: no local results to gather (not a folder)")
    files = [p for p in sorted(source.rglob("*")) if p.is_file() and not p.is_symlink()]
    clashing = [p for p in files if (target / p.relative_to(source)).exists()]
    if clashing:
        raise GatherError(f"{target / clashing[0].relative_to(source)} exists: gathering "
                          f"would overwrite it; the local results stay in {source}")
    total = 0
    for path in files:
        dest = target / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        temp = dest.with_name(f".{dest.name}.gather")
        shutil.copy2(path, temp)
        if _digest(temp) != _digest(path):
            temp.unlink(missing_ok=True)
            raise GatherError(f"{dest}: the copy differs from {path} (SHA-256); the local "
                              f"results stay in {source}")
        temp.rename(dest)
        total += path.stat().st_size
    if remove:
        shutil.rmtree(source)
    return Gathered(len(files), total, source, target)
