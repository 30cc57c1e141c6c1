"""How a dataset is made: progress lines, a seed per item, worker processes over chunks of
the work (each dying with its parent), and the default number of workers. Re-exported by
milabench.datasets, where every dataset module finds them."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

PROGRESS_EVERY = 10.0  # seconds between progress lines when stderr is not a terminal


@contextmanager
def progress(title: str, total: int, unit: str) -> Iterator[Callable[[int], None]]:
    """``advance(n)`` for ``total`` items of work: a rich progress bar when stderr is a
    terminal, else a line every PROGRESS_EVERY seconds; a closing line with the rate."""
    start = time.perf_counter()
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(f"{unit}s"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        ) as bar:
            task = bar.add_task(title, total=total)
            yield lambda n: bar.advance(task, n)
    else:
        done, last = [0], [start]

        def advance(n: int) -> None:
            done[0] += n
            now = time.perf_counter()
            if now - last[0] >= PROGRESS_EVERY and done[0] < total:
                last[0] = now
                rate = done[0] / (now - start)
                left = (total - done[0]) / rate
                left_text = f"{left:.0f} s" if left < 120 else f"{left / 60:.0f} min"
                print(
                    f"{title}: {done[0]:,}/{total:,} {unit}s ({rate:,.0f}/s, about "
                    f"{left_text} left)",
                    file=sys.stderr,
                    flush=True,
                )

        yield advance
    elapsed = time.perf_counter() - start
    print(
        f"{title}: {total:,} {unit}s in {elapsed:,.1f} s ({total / max(elapsed, 1e-9):,.0f}/s)",
        file=sys.stderr,
        flush=True,
    )


def item_seed(seed: int, *keys: Any) -> int:
    """A stable per-item seed (same on every machine and Python hash seed)."""
    text = ":".join(map(str, (seed, *keys))).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little")


def parallel(
    function: Callable[[Any], Any],
    items: Sequence[Any],
    workers: int = 1,
    on_result: Callable[[Any], Any] | None = None,
) -> list:
    """``function`` over ``items`` in ``workers`` processes (in order); ``on_result`` is
    called with each result as soon as it is there (for progress)."""
    if workers <= 1 or len(items) <= 1:
        results = []
        for item in items:
            results.append(function(item))
            if on_result is not None:
                on_result(results[-1])
        return results
    with multiprocessing.get_context("fork").Pool(
        min(workers, len(items)), initializer=_die_with_parent
    ) as pool:
        if on_result is None:
            return pool.map(function, items, chunksize=max(1, len(items) // (4 * workers)))
        results = []
        for result in pool.imap(function, items):
            results.append(result)
            on_result(result)
        return results


def _die_with_parent() -> None:
    """A pool worker ends with the process that made it: a generator killed by SIGKILL
    would otherwise leave its workers writing, then waiting for ever for work."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def map_chunks(
    function: Callable[[Any], Any],
    count: int,
    workers: int,
    task: Callable[[range], Any] = lambda r: r,
    on_result: Callable[[Any], Any] | None = None,
    chunk: int | None = None,
) -> list:
    """``function`` over ``task(r)`` for ``count`` items cut into ranges ``r``, in
    ``workers`` processes (in order). Four chunks per worker: items differ in cost, and
    smaller chunks keep every worker busy to the end; ``chunk`` caps a chunk's items
    (more, smaller chunks: finer progress through ``on_result``)."""
    parts = 4 * max(1, workers)
    if chunk is not None:
        parts = max(parts, -(-count // chunk))
    return parallel(function, [task(r) for r in chunks(count, parts)], workers, on_result)


def chunks(count: int, parts: int) -> list[range]:
    """Split range(count) into ``parts`` contiguous ranges (for parallel writers)."""
    parts = max(1, min(parts, count))
    step = -(-count // parts)
    return [range(i, min(i + step, count)) for i in range(0, count, step)]


def default_workers() -> int:
    return max(1, min(8, len(os.sched_getaffinity(0))))


def flatten(groups: Iterable[Iterable[Any]]) -> list[Any]:
    return [x for g in groups for x in g]
