"""A job's prepare commands (drop caches, synthesise data), run by the supervisor before
its instances, under the same protection: a session of their own, killed with the
supervisor, stopped by its stop signals."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

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
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            out.write(f"$ {command}\n".encode())
            out.flush()
            start = out.tell()
            proc = subprocess.Popen(
                [sys.executable, "-c", GUARD, command, str(os.getpid())],
                env=env,
                stdout=out,
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
            with open(log_path, "rb") as f:
                f.seek(start)
                tail = f.read()[-2000:].decode(errors="replace").strip().splitlines()[-1:]
            log.warning(
                "prepare command of %s failed (exit %d, continuing): %s: %s (log: %s)",
                job.fullname,
                code,
                command,
                (tail or [""])[0],
                log_path,
            )
    return outcomes


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
