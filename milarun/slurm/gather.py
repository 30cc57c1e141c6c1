"""Bring a node's results back from node-local disk, byte-exact.

A fleet run with ``--local-dir`` writes each node's results on that node's own disk (fast,
and no shared file system traffic while measuring); at the end of its task, each node copies
its folder into the shared ``<out>/nodes/<node>/``. Every copy is compared byte for byte
with its source (logs are appended to the node's earlier ones, as `jobs` does); the local
copy is removed only when all match, and a file already in the shared folder is never
overwritten. A gather cut short (a full shared disk) can be run again: copies it already
made and verified are recognised, a log it appended is not appended twice (a journal in the
local folder; an append that failed half-way is cut back), and nothing is lost meanwhile.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from milarun.errors import GatherError
from milarun.machine import watchdog
from milarun.results import bulk, digest

LOGS = "logs"  # `jobs` writes <out>/logs/<name>.J<id>.log, one per instance, appended
JOURNAL = ".milarun-gather.json"  # in the source: the logs already appended to the target


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
    # the folder's lock is its run's, not a result; logs go on where a run left them; the
    # digest is the target's own, written once its files are all there
    files = [
        p
        for p in sorted(source.rglob("*"))
        if p.is_file()
        and not p.is_symlink()
        and p.name not in (watchdog.LOCK_NAME, JOURNAL)
        and not p.name.startswith(digest.NAME)
    ]
    logs = [p for p in files if p.parent == source / LOGS]
    others = [p for p in files if p not in logs]
    # a copy already there and identical is an earlier gather's, cut short: not a clash
    done = {p for p in others if _same(target / p.relative_to(source), p)}
    clashing = [p for p in others if p not in done and (target / p.relative_to(source)).exists()]
    if clashing:
        raise GatherError(
            f"{target / clashing[0].relative_to(source)} exists: gathering "
            f"would overwrite it; the local results stay in {source}"
        )
    journal = _journal(source)
    total = 0
    for path in logs:  # appended, as `jobs` appends to a log in its own folder
        key = str(path.relative_to(source))
        size = path.stat().st_size
        if journal.get(key) != size:
            _append(path, target / key, source)
            journal[key] = size
            _write_journal(source, journal)
        total += size
    for path in (p for p in others if p not in done):
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
                f"{dest}: cannot copy ({err.strerror or err}); the local results stay in "
                f"{source}; gather again once fixed"
            ) from None
        if not same:
            temp.unlink(missing_ok=True)
            raise GatherError(
                f"{dest}: the copy differs from {path}; the local results stay in {source}"
            )
        total += path.stat().st_size
    total += sum(p.stat().st_size for p in done)
    # A report of the fleet reads this node's results from it (milarun.results.digest):
    # made here, on the node's own CPUs, as the files were just read for the comparison.
    bulk.write_digest(target)
    if remove:
        shutil.rmtree(source)
    return Gathered(len(files), total, source, target)


def _same(dest: Path, path: Path) -> bool:
    try:
        return dest.is_file() and filecmp.cmp(dest, path, shallow=False)
    except OSError:
        return False


def _append(path: Path, dest: Path, source: Path) -> None:
    """Append one log, all or nothing: a failed append is cut back to where it began."""
    before = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "rb") as src, open(dest, "ab") as out:
            before = out.tell()
            shutil.copyfileobj(src, out)
    except OSError as err:
        if before is not None:
            try:
                os.truncate(dest, before)
            except OSError:
                pass
        raise GatherError(
            f"{dest}: cannot append ({err.strerror or err}); the local results stay in "
            f"{source}; gather again once fixed"
        ) from None


def _journal(source: Path) -> dict[str, int]:
    try:
        data = json.loads((source / JOURNAL).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, int)}


def _write_journal(source: Path, journal: dict[str, int]) -> None:
    temp = source / f"{JOURNAL}.tmp"
    temp.write_text(json.dumps(journal))
    temp.replace(source / JOURNAL)
