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

from milarun import errors
from milarun.results import digest, jsonfile, sealing
from milarun.results.files import as_result, load_result
from milarun.results.schema import DOCTOR_RECORD
from milarun.results.shape import result_problem
from milarun.results.upgrade import json_fields

PARALLEL_FROM = 2_000  # below this, starting the workers costs more than they save
CHUNK = 500  # files a worker reads per task
MAX_WORKERS = 8
SHARED = ("system", "isolation")  # records most results of a node have alike

Found = tuple[dict[str, Any] | None, str | None]  # the result, else why it was skipped


def invalid_result(data: dict[str, Any]) -> str | None:
    """Why a loaded result cannot be used, or None."""
    problem = result_problem(data)
    if problem:
        return problem
    if data["success"] and not isinstance(data.get("timings"), dict):
        return "successful result without 'timings' (partial file?)"
    return None


def is_result_file(name: str) -> bool:
    """A file name a results folder's reader takes (not a hidden file, not a doctor record)."""
    return name.endswith(".json") and not name.startswith((".", DOCTOR_RECORD))


def read_one(path: Path, seal: bool, index: digest.Digest | None = None) -> Found:
    """One file: its checked result (sealed with ``seal``, see sealing.seal), or the reason it
    was skipped; from its entry in ``index`` (its folder's digest) while that holds."""
    taken = index.take(path) if index is not None else None
    if taken is not None and taken.skipped is not None:
        return None, taken.skipped
    try:
        data = as_result(taken.result, path) if taken is not None else load_result(path)
    except errors.ResultError as err:
        return None, str(err).split(": ", 1)[-1]
    reason = invalid_result(data)
    if reason:
        return None, reason
    if seal:
        if taken is not None:
            sealing.seal(data, taken.peak, digested=True)
        else:
            sealing.seal(data)
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
        peak = sealing.drop_samples(data)
        if digest.keyable(data):
            entries.append((path.name, digest.entry(before, json_fields(data), peak, None)))
    return digest.write(folder, entries) if entries else None


Task = tuple[Path, list[str]]  # a folder and names of files in it: a worker's task


def _read_here(task: Task, seal: bool, digests: bool = True) -> list[Found]:
    """read_one of each file of a task, through its folder's digest for a report that takes
    them (``digests``; never unsealed: the history hashes each file's own content)."""
    folder, names = task
    index = digest.load(folder) if seal and digests else None
    return [read_one(folder / name, seal, index) for name in names]


def _read_chunk(task: Task, seal: bool, digests: bool = True) -> list[Found]:
    """A worker's task: _read_here, its results' system records shared."""
    found = _read_here(task, seal, digests)
    # One object per distinct system (and isolation) record of the chunk (a node's results
    # share theirs): pickled once, and shared once read back (100,000 copies of the systems
    # were a sixth of the memory); a report's sections read each distinct one once.
    shared: dict[bytes, Any] = {}
    for data, _ in found:
        for key in SHARED:
            record = data.get(key) if data is not None else None
            if data is not None and isinstance(record, dict):
                data[key] = shared.setdefault(jsonfile.canonical(record), record)
    return found


def read_folders(
    folders: list[Task], seal: bool, digests: bool = True
) -> Iterator[tuple[Path, list[str], list[Found]]]:
    """The files of each folder, a task at a time in the order given: the folder, the
    names of the task's files and what read_one found of each."""
    workers = min(len(os.sched_getaffinity(0)), MAX_WORKERS)
    tasks = _tasks(folders, seal and digests)
    if sum(len(names) for _, names in folders) < PARALLEL_FROM or workers < 2:
        for task in tasks:
            yield (*task, _read_here(task, seal, digests))
        return
    done = 0
    try:
        # fork: a worker starts at once with what is imported here (forkserver and spawn
        # would import the caller's __main__ again, which a script may not guard); gc off
        # in workers, as in the loader (plain data, no cycles)
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=gc.disable) as pool:
            found_each = pool.map(
                _read_chunk, tasks, itertools.repeat(seal), itertools.repeat(digests)
            )
            for task, found in zip(tasks, found_each):
                yield (*task, found)
                done += 1
    except (BrokenProcessPool, OSError):
        # a worker killed (out of memory?) or none could start: the rest read here
        for task in tasks[done:]:
            yield (*task, _read_here(task, seal, digests))


def _tasks(folders: list[Task], seal: bool) -> list[Task]:
    """Each folder's files in tasks of up to CHUNK; those of a folder with a digest in one
    task, so that its digest is parsed once."""
    tasks: list[Task] = []
    for folder, names in folders:
        if not names:
            continue
        size = len(names) if seal and (folder / digest.NAME).is_file() else CHUNK
        tasks += [(folder, names[i : i + size]) for i in range(0, len(names), size)]
    return tasks
