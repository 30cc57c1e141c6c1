"""Warm starts: instances forked from a process that has already imported torch and milarun.

The supervisor keeps one warm process (``milarun.cli.warmstart``) per environment its
instances start with, leaving aside the variables each instance reads only after it starts
(its device, its result stamp, ...): torch and OpenMP read the others when they load. Each
instance forked from it is still a process of its own (own session, student cgroups, log,
watchdog, result); a ``ForkedProcess`` gives the supervisor the same view of it as a
``subprocess.Popen`` of a cold start. A warm process that dies takes no instance with it:
its running children become the supervisor's (a subreaper), and the next instance gets a
fresh warm process, else a cold start; the result says which (``startup.start``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milarun.machine import watchdog
from milarun.measure import diagnostics, startup

log = logging.getLogger("milarun.run.launch")

# Read by an instance after it starts, so they may differ between the forks of one process.
PER_INSTANCE_ENV = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "MILARUN_DEVICE",
        "MILARUN_PCI_BUS_IDS",
        "MILARUN_CGROUP",
        diagnostics.DEADLINE_ENV,
        startup.LAUNCHED_AT_ENV,
        startup.START_ENV,
        watchdog.RESULT_STAMP_ENV,
    }
)
READY_TIMEOUT = 120.0  # importing torch and the CLI, on a loaded 2-core machine
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def env_prefix(words: list[str]) -> dict[str, str] | None:
    """The variables of an ``env NAME=VALUE ...`` prefix (it only sets variables, so a fork
    with them set is the same start), else None: any other prefix must exec."""
    if not words:
        return {}
    if words[0] != "env" or not all(_ASSIGNMENT.match(w) for w in words[1:]):
        return None
    return dict(w.split("=", 1) for w in words[1:])


def run_words(command: list[str]) -> list[str] | None:
    """The ``milarun`` arguments of a cold instance's command, or None if it is not
    ``python -m milarun ...`` (a torchrun job forks its ranks itself)."""
    if len(command) > 3 and command[0] == sys.executable and command[1:3] == ["-m", "milarun"]:
        return command[3:]
    return None


class ForkedProcess:
    """An instance forked by a warm process, seen as ``subprocess.Popen`` sees a child."""

    def __init__(self, pid: int, warm: WarmProcess):
        self.pid, self.warm = pid, warm
        self.returncode: int | None = None
        self.args = ["(forked)"]

    def poll(self) -> int | None:
        if self.returncode is None:
            self.warm.collect()
        if self.returncode is None and not self.warm.alive():
            self.warm.collect()  # what it said before it died
            if self.returncode is None:
                self._reap_orphan()
        return self.returncode

    def _reap_orphan(self) -> None:
        """The warm process died: this child is ours now (the supervisor is a subreaper)."""
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by the warm process, its answer lost; or no
            try:  # subreaper here, and init has it: gone once it no longer exists
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.returncode = 255
            return
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@dataclass
class Refused(Exception):
    """No fork: start this instance cold, for ``reason``."""

    reason: str


@dataclass
class WarmProcess:
    """One warm process and the pipes to it."""

    process: subprocess.Popen
    requests: int
    replies: int
    log_path: Path
    children: dict[int, ForkedProcess] = field(default_factory=dict)
    answers: list[dict[str, Any]] = field(default_factory=list)
    buffer: bytes = b""
    retired: str | None = None
    closed: bool = False

    def alive(self) -> bool:
        return not self.closed and self.process.poll() is None

    def collect(self) -> bool:
        """Read what the warm process said; False at its end of file."""
        while not self.closed:
            try:
                chunk = os.read(self.replies, 65536)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            self.buffer += chunk
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                message = json.loads(line)
                if "exit" in message:
                    child = self.children.pop(message["exit"], None)
                    if child is not None:
                        child.returncode = os.waitstatus_to_exitcode(message["status"])
                else:
                    self.answers.append(message)
        return False

    def answer(self, timeout: float, stop: Callable[[], bool]) -> dict[str, Any]:
        """The warm process's next answer; Refused when it dies, hangs or we must stop."""
        end = time.monotonic() + timeout
        while not self.answers:
            if not self.collect() or not self.alive():
                pid = self.process.pid
                raise Refused(f"the warm process (pid {pid}) died, see {self.log_path}")
            if stop():
                raise Refused("stopped while waiting for the warm process")
            if time.monotonic() > end:
                raise Refused(f"no answer from the warm process in {timeout:.0f} s")
            time.sleep(0.005)
        return self.answers.pop(0)

    def close(self) -> None:
        """Let it go: it ends at the end of its requests; its running children become
        the supervisor's."""
        if self.closed:
            return
        self.collect()
        self.closed = True
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class WarmPool:
    """The warm processes of one ``jobs`` run, by environment."""

    def __init__(self, logs: Path, supervisor: int):
        self.logs, self.supervisor = logs, supervisor
        self.current: dict[tuple[tuple[str, str], ...], WarmProcess] = {}
        self.every: list[WarmProcess] = []

    def pids(self) -> set[int]:
        return {w.process.pid for w in self.every if w.process.returncode is None}

    def _spawn(self, env: dict[str, str], cpus: list[int], stop: Callable[[], bool]) -> WarmProcess:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        # in a folder of their own: <logs>/*.log are the instances' own, one each
        log_path = self.logs / "warm" / f"{os.getpid()}.{len(self.every) + 1}.log"
        try:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "ab", buffering=0) as out:
                process = subprocess.Popen(
                    # the logs folder last: its forks, whose command line is its own, are
                    # found by their run's folder as a cold instance is
                    [
                        sys.executable,
                        "-m",
                        "milarun.cli.warmstart",
                        str(req_r),
                        str(rep_w),
                        str(self.logs),
                    ],  # fmt: skip
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    pass_fds=(req_r, rep_w),
                    start_new_session=True,  # Ctrl-C reaches the supervisor, not this
                    preexec_fn=watchdog.die_with_parent(
                        self.supervisor,
                        then=lambda: os.sched_setaffinity(0, cpus) if cpus else None,
                    ),
                )
        except (OSError, subprocess.SubprocessError) as err:
            for fd in (req_r, req_w, rep_r, rep_w):
                os.close(fd)
            raise Refused(f"the warm process could not start ({err})") from None
        os.close(req_r)
        os.close(rep_w)
        os.set_blocking(rep_r, False)
        warm = WarmProcess(process, req_w, rep_r, log_path)
        self.every.append(warm)
        ready = warm.answer(READY_TIMEOUT, stop)
        if ready.get("unsafe"):
            warm.close()
            raise Refused(f"the warm process cannot fork: {ready['unsafe']}")
        return warm

    def fork(
        self,
        words: list[str],
        module: str,
        env: dict[str, str],
        log_path: Path,
        log_limit: int,
        procs: list[Path],
        cpus: list[int],
        timeout: float,
        stop: Callable[[], bool],
        cwd: Path | None = None,
    ) -> tuple[ForkedProcess, str]:
        """Fork an instance (``milarun WORDS`` in ``env``, joining the cgroups whose
        ``procs`` files are given, whose cpuset has ``cpus``); returns it and how it
        started; it runs in ``cwd`` (default: ours). Refused: start it cold."""
        key = tuple(sorted((k, v) for k, v in env.items() if k not in PER_INSTANCE_ENV))
        if cpus and "OMP_NUM_THREADS" not in env:
            # OpenMP counts the CPUs it may use when torch loads: a warm process with as
            # many as the instance's group, so that no thread count is set after the fork
            # (torch.set_num_threads, even to the count it has, slowed LSTMs by 10-15%)
            key += (("cpus in the group", str(len(cpus))),)
        warm = self.current.get(key)
        note = "forked"
        if warm is not None and (warm.retired or not warm.alive()):
            why = warm.retired or f"pid {warm.process.pid} died"
            note = f"forked: a fresh warm process (the last one: {why})"
            warm.close()
            warm = None
        if warm is None:
            warm = self._spawn(env, cpus if "OMP_NUM_THREADS" not in env else [], stop)
            self.current[key] = warm
        request = {
            "op": "fork",
            "module": module,
            "argv": words,
            "env": {**env, startup.START_ENV: note},
            "cwd": str(cwd) if cwd is not None else os.getcwd(),
            "log": str(log_path),
            "log_limit": log_limit,
            "procs": [str(p) for p in procs],
        }
        try:
            os.write(warm.requests, (json.dumps(request) + "\n").encode())
        except OSError as err:
            raise Refused(f"the warm process (pid {warm.process.pid}) is gone ({err})") from None
        answer = warm.answer(timeout, stop)
        if answer.get("retire"):
            warm.retired = str(answer["retire"])
            log.warning("a fresh warm process for the next instances: %s", warm.retired)
        if answer["op"] == "refused":
            raise Refused(answer["reason"])
        if answer["op"] == "failed":
            raise StartFailed(answer["reason"])
        child = ForkedProcess(answer["pid"], warm)
        warm.children[child.pid] = child
        return child, note

    def close(self) -> None:
        for warm in self.every:
            warm.close()
        self.current.clear()


class StartFailed(Exception):
    """The forked child could not be set up (its cgroups, its log): it did not start."""
