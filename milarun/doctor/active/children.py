"""The probe children of `doctor --active`: started together, each bounded by a timeout and
killed with its process group past it (or when doctor itself stops), their files read back
into a judge.Probed. Where each child runs (devices, CPU slices) is milarun.doctor.active.run's."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milarun import errors, results
from milarun.doctor.active import judge, probe_recorder
from milarun.doctor.active.load_watch import LoadWatch
from milarun.machine import watchdog
from milarun.results import jsonfile

MAX_PROBE_FILE = 4 * 2**20
STDERR_TAIL = 4000
BARRIER = "barrier"


@dataclass
class Child:
    probed: judge.Probed
    argv: list[str]
    env: dict[str, str]
    preexec: Callable[[], None] | None
    out: Path
    err: Path
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0


def _start(child: Child) -> None:
    with open(child.err, "wb") as err:
        child.process = subprocess.Popen(
            child.argv,
            env=child.env,
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=watchdog.die_with_parent(os.getpid(), then=child.preexec),
        )
    child.started = time.monotonic()
    child.probed.pid = child.process.pid  # the GPU's listed processes: this one is the probe


def _kill(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _finish(child: Child, timed_out: bool, timeout: float) -> judge.Probed:
    p = child.probed
    assert child.process is not None
    p.returncode, p.timed_out, p.timeout = child.process.returncode, timed_out, timeout
    p.seconds = time.monotonic() - child.started
    try:
        p.data = jsonfile.read_json(child.out, limit=MAX_PROBE_FILE)
    except errors.InputError:
        p.data = None
    p.stderr = child.err.read_bytes()[-STDERR_TAIL:].decode(errors="replace")
    barrier = child.out.parent / BARRIER / child.probed.kind
    if barrier.is_dir():  # its siblings wait for it no more (probe_recorder.Recorder)
        (barrier / f"{probe_recorder.GONE}.{child.out.stem}").touch()
    return p


def run_children(
    children: list[Child], timeout: float, watch: LoadWatch | None = None
) -> list[judge.Probed]:
    """Start every child (then the GPUs' load watch: no thread runs while they fork), wait for
    all of them, kill any past ``timeout``."""
    try:
        for child in children:
            _start(child)
        if watch is not None:
            watch.start()
        pending = list(children)
        while pending:
            for child in list(pending):
                assert child.process is not None
                late = time.monotonic() - child.started > timeout
                if child.process.poll() is None and late:
                    _kill(child.process)
                if child.process.returncode is not None:
                    _finish(child, late, timeout)
                    pending.remove(child)
            time.sleep(0.05)
    finally:  # Ctrl-C: no child outlives doctor
        for child in children:
            if child.process is not None and child.process.poll() is None:
                _kill(child.process)
        if watch is not None:
            watch.stop()
    return [c.probed for c in children]


def make_child(
    tmp: Path,
    probed: judge.Probed,
    spec: dict[str, Any],
    env: dict[str, str],
    probe: list[str],
    preexec: Callable[[], None] | None = None,
) -> Child:
    """A child running ``probe`` on a spec file in ``tmp`` (its result file beside it)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "", probed.label)  # cuda:0 -> cuda0
    out = tmp / f"{name}.json"
    spec_file = tmp / f"{name}.spec.json"
    results.write_atomic(spec_file, {**spec, "out": str(out)})
    environ = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    return Child(probed, [*probe, str(spec_file)], environ, preexec, out, tmp / f"{name}.log")


def barrier(tmp: Path, count: int, kind: str) -> dict[str, Any]:
    """Where the children of one kind meet before each phase (probe_recorder.Recorder)."""
    folder = tmp / BARRIER / kind
    folder.mkdir(parents=True, exist_ok=True)
    return {"folder": str(folder), "count": count}
