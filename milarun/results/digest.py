"""A results folder's digest: each result file's content as a report reads it (its monitor
samples dropped, their peak memory kept), keyed by the file's name, size and mtime.

A report of a fleet run of 100 nodes reads 100,000 files (1.8 GiB, three quarters of it
monitor samples): parsing and checking them was most of its time. Each node writes the
digest of its own folder at the end of its task (`milarun jobs` on a Slurm node, `milarun
slurm gather`), on its own CPUs; a report then reads one file a node, and takes an entry in
place of its file only while the file has the size and mtime the entry recorded (the test
rsync and make use), else it reads the file. A file changed within RACY_NS of the writing
is left out (a file system that keeps mtimes to the second could change it unseen). A
digest is a file a user hands us like the results: bounded, and each entry checked as its
file would be (milarun.results.bulk).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from milarun import errors
from milarun.results import jsonfile

NAME = ".milarun-digest"
FORMAT, VERSION = "milarun-digest", 1
RACY_NS = 2 * 10**9
MAX_BYTES = jsonfile.MAX_FILE_BYTES  # about 12,000 results of a fleet run


@dataclass(frozen=True)
class Taken:
    """A digest's entry for a file: its result (checked where it is read) and the peak
    memory of its samples, or why the file is no result."""

    result: Any = None
    peak: float | None = None
    skipped: str | None = None


@dataclass(frozen=True)
class Digest:
    entries: dict[str, Any]

    def take(self, path: Path) -> Taken | None:
        """The entry of ``path`` while the file is as recorded; None: read the file."""
        entry = self.entries.get(path.name)
        if not isinstance(entry, dict):
            return None
        try:
            info = os.stat(path)
        except OSError:
            return None
        if entry.get("size") != info.st_size or entry.get("mtime_ns") != info.st_mtime_ns:
            return None
        skipped, peak = entry.get("skipped"), entry.get("peak_memory")
        if isinstance(skipped, str):
            return Taken(skipped=skipped)
        if not isinstance(entry.get("result"), dict):
            return None
        if peak is not None and not (type(peak) in (int, float) and 0 <= peak < float("inf")):
            return None
        return Taken(entry["result"], None if peak is None else float(peak))

    def entry(self, path: Path) -> dict[str, Any] | None:
        """The recorded entry of ``path``, as it is, while the file is as recorded."""
        taken = self.take(path)
        return self.entries[path.name] if taken is not None else None


def load(folder: Path) -> Digest | None:
    """The digest of ``folder``; None when it has none or it is unusable (too large, not
    JSON, another format or version): its files are then read."""
    path = folder / NAME
    if not path.is_file():
        return None
    try:
        data = jsonfile.read_json(path, limit=MAX_BYTES, check_depth=False)
    except errors.InputError:
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    entries = data.get("entries")
    if data.get("version") != VERSION or not isinstance(entries, dict):
        return None
    return Digest(entries)


def entry(
    info: os.stat_result, result: dict[str, Any] | None, peak: float | None, skipped: str | None
) -> dict[str, Any]:
    """One file's entry: its stat, and its result (samples dropped) with their peak, or why
    it is no result."""
    recorded: dict[str, Any] = {"size": info.st_size, "mtime_ns": info.st_mtime_ns}
    if skipped is not None:
        recorded["skipped"] = skipped
    else:
        recorded.update(peak_memory=peak, result=result)
    return recorded


def keyable(result: Any) -> bool:
    """True when the result's JSON reads back the same: no NaN or infinity (a hand-edited
    file's, which the digest's encoder would write as null), none past the depth bound."""
    for depth, containers in enumerate(jsonfile.levels(result), 1):
        if depth > jsonfile.MAX_DEPTH:
            return False
        for value in containers:
            for item in value.values() if isinstance(value, dict) else value:
                if type(item) is float and not math.isfinite(item):
                    return False
    return True


def settled(info: os.stat_result, now_ns: int) -> bool:
    """True when a file's mtime is old enough to key it (RACY_NS)."""
    return info.st_mtime_ns <= now_ns - RACY_NS


def write(folder: Path, entries: Iterable[tuple[str, dict[str, Any]]]) -> Path | None:
    """Write the digest of ``folder`` (atomically: a report reads the old one or the new
    one); None, and no digest, when it would exceed MAX_BYTES or cannot be written."""
    body = {"format": FORMAT, "version": VERSION, "written_ns": time.time_ns()}
    body["entries"] = dict(entries)
    try:
        raw = orjson.dumps(body)
    except (TypeError, orjson.JSONEncodeError):
        return None
    target = folder / NAME
    temp = folder / f"{NAME}.{os.getpid()}.tmp"
    if len(raw) > MAX_BYTES:
        target.unlink(missing_ok=True)  # an older digest would be stale in part
        return None
    try:
        temp.write_bytes(raw)
        temp.replace(target)
    except OSError:
        temp.unlink(missing_ok=True)
        return None
    return target
