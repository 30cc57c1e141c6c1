"""Reading many result files: each one read, checked and (for reports) sealed, in worker
processes past PARALLEL_FROM files. Parsing and checking the JSON was most of a report's time
on a fleet run's 100,000 files; each file is independent, so the cores share them. A folder
with a digest (milarun.results.digest) is read from it, each entry checked as its file is."""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from milarun import errors, results
from milarun.results import digest, jsonfile, read

PARALLEL_FROM = 2_000  # below this, starting the workers costs more than they save
CHUNK = 500  # files a worker reads per task
MAX_WORKERS = 8

Found = tuple[dict[str, Any] | None, str | None]  # the result, else why it was skipped


def invalid_result(data: dict[str, Any]) -> str | None:
    """Why a loaded result cannot be used, or None."""
    problem = results.result_problem(data)
    if problem:
        return problem
    if data["success"] and not isinstance(data.get("timings"), dict):
        return "successful result without 'timings' (partial file?)"
    return None


def is_result_file(name: str) -> bool:
    """A file name a results folder's reader takes (not a hidden file, not a doctor record)."""
    return name.endswith(".json") and not name.startswith((".", results.DOCTOR_RECORD))


def read_one(path: Path, seal: bool, index: digest.Digest | None = None) -> Found:
    """One file: its checked result (sealed with ``seal``, see read.seal), or the reason it
    was skipped; from its entry in ``index`` (its folder's digest) while that holds."""
    taken = index.take(path) if index is not None else None
    if taken is not None and taken.skipped is not None:
        return None, taken.skipped
    try:
        data = (
            results.as_result(taken.result, path)
            if taken is not None
            else results.load_result(path)
        )
    except errors.ResultError as err:
        return None, str(err).split(": ", 1)[-1]
    reason = invalid_result(data)
    if reason:
        return None, reason
    if seal:
        if taken is not None:
            read.seal(data, taken.peak, digested=True)
        else:
            read.seal(data)
    return data, None


def write_digest(folder: Path) -> Path | None:
    """Write ``folder``'s digest of its own result files (not its subfolders'), keeping
    the entries of the digest there that still hold; None where none could be written."""
    old = digest.load(folder)
    now = time.time_ns()
    entries = []
    for path in sorted(p for p in folder.iterdir() if is_result_file(p.name)):
        try:
            before = os.stat(path)
        except OSError:
            continue
        if not digest.settled(before, now):
            continue
        kept = old.entry(path) if old is not None else None
        if kept is not None:
            entries.append((path.name, kept))
            continue
        data, reason = read_one(path, seal=False)
        try:
            after = os.stat(path)
        except OSError:
            continue
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            continue  # changed while read: read by each report instead
        if data is None:
            entries.append((path.name, digest.entry(before, None, None, reason)))
            continue
        peak = read.drop_samples(data)
        if digest.keyable(data):
            entries.append((path.name, digest.entry(before, data, peak, None)))
    return digest.write(folder, entries) if entries else None


def _read_here(paths: list[Path], seal: bool) -> list[Found]:
    """read_one of each path, through its folder's digest for a report (seal: the history
    hashes each file's own content)."""
    indexes = {folder: digest.load(folder) for folder in {p.parent for p in paths}} if seal else {}
    return [read_one(p, seal, indexes.get(p.parent)) for p in paths]


def _read_chunk(paths: list[Path], seal: bool) -> list[Found]:
    """A worker's task: _read_here, its results' system records shared."""
    found = _read_here(paths, seal)
    # One object per distinct system record of the chunk (a node's results share theirs):
    # pickled once, and shared once read back (100,000 copies were a sixth of the memory).
    shared: dict[bytes, Any] = {}
    for data, _ in found:
        system = data.get("system") if data is not None else None
        if data is not None and isinstance(system, dict):
            data["system"] = shared.setdefault(jsonfile.canonical(system), system)
    return found


def read_many(paths: list[Path], seal: bool) -> Iterator[tuple[Path, Found]]:
    """Each path with what read_one found, in the order given."""
    workers = min(len(os.sched_getaffinity(0)), MAX_WORKERS)
    chunks = _chunks(paths, seal)
    if len(paths) < PARALLEL_FROM or workers < 2:
        for chunk in chunks:
            yield from zip(chunk, _read_here(chunk, seal))
        return
    done = 0
    try:
        # fork: a worker starts at once with what is imported here (forkserver and spawn
        # would import the caller's __main__ again, which a script may not guard); gc off
        # in workers, as in the loader (plain data, no cycles)
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=gc.disable) as pool:
            for chunk, found in zip(chunks, pool.map(_read_chunk, chunks, itertools.repeat(seal))):
                yield from zip(chunk, found)
                done += 1
    except (BrokenProcessPool, OSError):
        # a worker killed (out of memory?) or none could start: the rest read here
        for chunk in chunks[done:]:
            yield from zip(chunk, _read_here(chunk, seal))


def _chunks(paths: list[Path], seal: bool) -> list[list[Path]]:
    """The paths in order, in tasks of up to CHUNK; the files of a folder with a digest
    make one task of their own, so that its digest is parsed once."""
    chunks: list[list[Path]] = []
    digested: dict[Path, bool] = {}
    for path in paths:
        folder = path.parent
        if folder not in digested:
            digested[folder] = seal and (folder / digest.NAME).is_file()
        last = chunks[-1] if chunks else []
        previous = last[-1].parent if last else None
        if previous is not None and (digested[folder] or digested[previous]):
            joins = previous == folder
        else:
            joins = 0 < len(last) < CHUNK
        if joins:
            last.append(path)
        else:
            chunks.append([path])
    return chunks
