"""Reading many result files: each one read, checked and (for reports) sealed, in worker
processes past PARALLEL_FROM files. Parsing and checking the JSON was most of a report's time
on a fleet run's 100,000 files; each file is independent, so the cores share them."""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from milarun import errors, results
from milarun.results import jsonfile, read

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


def read_one(path: Path, seal: bool) -> Found:
    """One file: its checked result (sealed with ``seal``, see read.seal), or the reason it
    was skipped."""
    try:
        data = results.load_result(path)
    except errors.ResultError as err:
        return None, str(err).split(": ", 1)[-1]
    reason = invalid_result(data)
    if reason:
        return None, reason
    if seal:
        read.seal(data)
    return data, None


def _read_chunk(paths: list[Path], seal: bool) -> list[Found]:
    found = [read_one(p, seal) for p in paths]
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
    if len(paths) < PARALLEL_FROM or workers < 2:
        yield from ((p, read_one(p, seal)) for p in paths)
        return
    chunks = [paths[i : i + CHUNK] for i in range(0, len(paths), CHUNK)]
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
            yield from ((p, read_one(p, seal)) for p in chunk)
