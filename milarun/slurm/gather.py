"""Bring a node's results back from node-local disk, byte-exact.

A fleet run with ``--local-dir`` writes each node's results on that node's own disk (fast,
and no shared file system traffic while measuring); at the end of its task, each node copies
its folder into the shared ``<out>/nodes/<node>/``. Every copy is compared byte for byte
with its source (logs are appended to the node's earlier ones, as `jobs` does); the local
copy is removed only when all match, and a file already in the shared folder is never
overwritten.
"""

from __future__ import annotations

import filecmp
import shutil
from dataclasses import dataclass
from pathlib import Path

from milarun.errors import GatherError
from milarun.machine import watchdog

LOGS = "logs"  # `jobs` writes <out>/logs/<name>.J<id>.log, one per instance, appended


@dataclass(frozen=True)
class Gathered:
    files: int
    bytes: int
    source: Path
    target: Path


def gather(source: Path, target: Path, remove: bool = True) -> Gathered:
    """Copy every file under ``source`` into ``target`` (same relative paths), compare each
    copy byte for byte, then remove ``source`` (``remove``)."""
    if not source.is_dir():
        raise GatherError(f"{source}: no local results to gather (not a folder)")
    if target.resolve().is_relative_to(source.resolve()):
        raise GatherError(f"{target} is inside {source}: gather into another folder")
    # the folder's lock is its run's, not a result; logs go on where a run left them
    files = [
        p
        for p in sorted(source.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.name != watchdog.LOCK_NAME
    ]
    logs = [p for p in files if p.parent == source / LOGS]
    clashing = [p for p in files if p not in logs and (target / p.relative_to(source)).exists()]
    if clashing:
        raise GatherError(
            f"{target / clashing[0].relative_to(source)} exists: gathering "
            f"would overwrite it; the local results stay in {source}"
        )
    total = 0
    for path in logs:  # appended, as `jobs` appends to a log in its own folder
        dest = target / path.relative_to(source)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "rb") as src, open(dest, "ab") as out:
                shutil.copyfileobj(src, out)
        except OSError as err:
            raise GatherError(
                f"{dest}: cannot append ({err.strerror or err}); the local results stay in {source}"
            ) from None
        total += path.stat().st_size
    for path in (p for p in files if p not in logs):
        dest = target / path.relative_to(source)
        temp = dest.with_name(f".{dest.name}.gather")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, temp)
            same = filecmp.cmp(temp, path, shallow=False)
            if same:
                temp.rename(dest)
        except OSError as err:  # a full or read-only shared disk: one line, nothing lost
            temp.unlink(missing_ok=True)
            raise GatherError(
                f"{dest}: cannot copy ({err.strerror or err}); the local results stay in {source}"
            ) from None
        if not same:
            temp.unlink(missing_ok=True)
            raise GatherError(
                f"{dest}: the copy differs from {path}; the local results stay in {source}"
            )
        total += path.stat().st_size
    if remove:
        shutil.rmtree(source)
    return Gathered(len(files), total, source, target)
