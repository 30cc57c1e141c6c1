"""The start-up of a benchmark process: from its launch to its first slice, and how it began.

Under ``milarun jobs`` an instance starts cold (a new interpreter imports torch and the
test) or forked from a warm process that imported them once (``milarun.cli.warmstart``); the
supervisor says which in START_ENV and when it launched the instance in LAUNCHED_AT_ENV,
so the split below counts from the launch either way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from milarun.results.records import Startup

LAUNCHED_AT_ENV = "MILARUN_LAUNCHED_AT"  # epoch seconds: when the supervisor launched it
START_ENV = "MILARUN_START"  # "cold" or "forked", then ": why" where it is not the usual


def process_start() -> float | None:
    """When this process started (epoch seconds, to the kernel's clock tick).

    Not psutil's create_time: it adds the start to the boot time of /proc/stat, which is in
    whole seconds, so every start came out 0-1 s early.
    """
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # field 22, starttime, in clock ticks since boot
        since = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):  # not Linux: no split
        return None
    return time.time() - since


def launched_at(environ: Any = None) -> float | None:
    """The supervisor's launch time, else this process's start."""
    env = os.environ if environ is None else environ
    try:
        launched = float(env.get(LAUNCHED_AT_ENV, ""))
    except ValueError:
        return process_start()
    return launched if 0 < launched <= time.time() else process_start()


def startup(imported_at: float, called_at: float, logs: Sequence[Any]) -> Startup:
    """The start-up cost of this process, from the ``train`` log (else the first one)."""
    mode, _, said = os.environ.get(START_ENV, "cold").partition(":")
    how, note = mode.strip() or "cold", said.strip() or None
    log = next((lg for lg in logs if lg.name == "train"), logs[0] if logs else None)
    start = launched_at()
    imports = imported_at - start if start is not None else None
    if log is None:
        return Startup(imports, start=how, start_note=note)
    return Startup(
        imports,
        setup=log.wall_start - called_at if log.wall_start is not None else None,
        first_step=log.first_block,
        to_first_slice=(
            log.first_slice_at - start
            if start is not None and log.first_slice_at is not None
            else None
        ),
        start=how,
        start_note=note,
    )
