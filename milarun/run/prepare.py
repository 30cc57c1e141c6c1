"""A job's prepare commands (drop caches, synthesise data), run by the supervisor before
its instances, under the same protection: a session of their own, killed with the
supervisor, stopped by its stop signals."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from milarun.run.plan import LaunchOptions
from milarun.run.profile import Job

log = logging.getLogger("milarun")
# The prepare's shell runs under this guard, leader of the session: SIGTERM (from us, or
# the kernel when we die however we die) ends the whole session, the shell's children too.
GUARD = """\
import ctypes, os, signal, subprocess, sys
signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL))
ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[2]):  # the supervisor died before the line above
    os.killpg(0, signal.SIGKILL)
sys.exit(subprocess.call(sys.argv[1], shell=True))
"""


def run_prepare(
    job: Job, opts: LaunchOptions, stop: Callable[[], str | None] = lambda: None
) -> list[dict[str, Any]]:
    """Run the job's prepare commands; a failure is a warning (once per command).

    Each runs in a session of its own (Ctrl-C reaches the supervisor, which ends the whole
    session), dies with the supervisor, and is stopped as the instances are when ``stop()``
    names a signal. Its output goes to logs/<job>.prepare.log. Returns what ran and how
    it ended, for the results (e.g. caches not dropped because dropping them needs root:
    no setuid helper is ever used for it).
    """
    outcomes = []
    log_path = opts.outdir / "logs" / f"{job.fullname}.prepare.log"
    for command in job.prepare:
        if stop():
            break
        # The command sees the run's data folder and this Python (e.g. to synthesise data:
        # "$MILARUN_PYTHON" -m milarun dataset mnist --synthetic).
        env = {
            **os.environ,
            "MILARUN_DATAROOT": str(opts.dataroot),
            "MILARUN_PYTHON": sys.executable,
        }
        out, unlogged = _open_log(log_path, command)
        with out if out is not None else contextlib.nullcontext():
            start = out.tell() if out is not None else 0
            proc = subprocess.Popen(
                [sys.executable, "-c", GUARD, command, str(os.getpid())],
                env=env,
                stdout=out if out is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            code = _wait_prepare(proc, stop, opts.grace)
        outcomes.append({"command": command, "returncode": code})
        if code is None:
            outcomes[-1]["stopped_by"] = stop()
            break
        if code != 0 and command not in opts.prepare_warned:
            opts.prepare_warned.add(command)
            tail = [unlogged] if unlogged else _tail(log_path, start)
            log.warning(
                "prepare command of %s failed (exit %d, continuing): %s: %s (log: %s)",
                job.fullname,
                code,
                command,
                (tail or [""])[0],
                log_path,
            )
    return outcomes


def _open_log(log_path: Path, command: str) -> tuple[BinaryIO | None, str | None]:
    """The prepare log, its command line written; None and why where the disk cannot take
    it (full): the command still runs (it may be the cleanup that frees the disk), its
    output not kept."""
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        out = open(log_path, "ab")  # noqa: SIM115 (the caller closes it after the command)
    except OSError as err:
        return None, f"its output not kept: cannot write {log_path} ({err.strerror})"
    try:
        out.write(f"$ {command}\n".encode())
        out.flush()
    except OSError as err:
        with contextlib.suppress(OSError):  # its buffer cannot be flushed either
            out.close()
        return None, f"its output not kept: cannot write {log_path} ({err.strerror})"
    return out, None


def _tail(log_path: Path, start: int) -> list[str]:
    try:
        with open(log_path, "rb") as f:
            f.seek(start)
            return f.read()[-2000:].decode(errors="replace").strip().splitlines()[-1:]
    except OSError:
        return []


def _wait_prepare(
    proc: subprocess.Popen, stop: Callable[[], str | None], grace: float
) -> int | None:
    """The prepare's exit code; None when a stop signal ended it (its whole session:
    SIGTERM, then SIGKILL after the grace period)."""
    while proc.poll() is None:
        if stop():
            _signal_session(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
            _signal_session(proc.pid, signal.SIGKILL)  # and whatever it started
            proc.wait()
            return None
        time.sleep(0.1)
    return proc.returncode


def _signal_session(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
