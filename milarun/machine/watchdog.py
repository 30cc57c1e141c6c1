"""Keep a suite run from outliving its supervisor, and two suite runs out of one folder.

- ``die_with_parent``: the instance's ``preexec_fn``; the kernel SIGKILLs it when
  ``milarun jobs`` dies, however it dies (SIGKILL, OOM killer, closed ssh session).
- ``watch_parent``: inside an instance, a thread that ends the process when its parent is
  gone, for the processes PDEATHSIG does not reach (torchrun's ranks, see below).
- ``hold_outdir``: the lock on ``<out>/.milarun.lock`` held by one ``jobs`` for its run.
"""

from __future__ import annotations

import ctypes
import fcntl
import math
import os
import resource
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from milarun import errors

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PR_SET_CHILD_SUBREAPER = 36
SUPERVISOR_ENV = "MILARUN_SUPERVISOR_PID"  # set by `jobs` for its instances
RESULT_STAMP_ENV = "MILARUN_RESULT_STAMP"  # the stamp of the instance's result file name
LOCK_NAME = ".milarun.lock"
WATCH_INTERVAL = 0.5


class OutdirBusy(RuntimeError):
    """Another live ``milarun jobs`` writes into the output folder."""


def die_with_parent(
    supervisor: int, then: Callable[[], None] | None = None, written: int = 0
) -> Callable[[], None]:
    """A ``preexec_fn``: SIGKILL this child when the process that forked it dies, and cap
    the size of its files at the log cap past ``written`` (the bytes its log, appended to,
    already holds from earlier runs into the folder: the cap is for what this run writes).

    Why PR_SET_PDEATHSIG is right here: it survives the execs of ``cgexec`` and of an
    ``exec_prefix`` such as ``nocache`` (they exec, they do not fork), so it reaches the test
    process itself. It fires when the *thread* that forked the child ends: the Supervisor
    forks from the main thread only (it installs signal handlers, which Python allows in the
    main thread only), and that thread lives as long as the process. The kernel clears it on
    exec of a set-user-ID binary and in forked children (torchrun's ranks): ``watch_parent``
    in the instance covers those.
    """
    # Looked up here, not in the child: loading a library between fork and exec may
    # deadlock when another thread of the parent held the loader's lock.
    # Not Linux: no prctl; the instance's watch_parent is then the only guard.
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    file_limit = log_limit() + max(0, written)

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # No file of the instance (its log first of all) may grow past the cap: a test that
        # prints without end fails ("File too large") instead of filling the disk.
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft == resource.RLIM_INFINITY or soft > file_limit:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, hard))
        # The race: the supervisor may have died between fork and prctl; then nobody will
        # send the signal, and this child is already an orphan.
        if os.getppid() != supervisor:
            os._exit(1)
        if then is not None:
            then()

    return preexec


LOG_LIMIT_ENV = "MILARUN_LOG_LIMIT_MB"
DEFAULT_LOG_LIMIT_MB = 1024


def become_subreaper() -> bool:
    """Orphans of our descendants (a test's setsid() child, a prefix that forks and exits)
    become our children instead of init's, so ``kill_escaped`` can find them. False where
    the kernel has no such thing."""
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def kill_escaped(keep: Callable[[int], bool] = lambda pid: False) -> list[int]:
    """SIGKILL every descendant of this process that ``keep`` does not claim, and reap
    it; returns their pids. Run once no instance is running: what is left escaped."""
    import psutil

    killed: list[int] = []
    for _ in range(10):  # killing an escapee reparents its own children to us: again
        left = [p for p in psutil.Process().children(recursive=True) if not keep(p.pid)]
        if not left:
            break
        for proc in left:
            try:
                proc.kill()
                killed.append(proc.pid)
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=5)
    return killed


MAX_LOG_LIMIT_MB = 2**20  # 1 TiB: past it (inf, 1e30) the cap is no cap, or overflows


def log_limit() -> int:
    """Bytes an instance may write to its files (its log): $MILARUN_LOG_LIMIT_MB, else
    1 GiB. A value that is not a number of MiB from 1 to 1 TiB is a UsageError naming it:
    `jobs` checks it before anything runs (check_log_limit)."""
    text = os.environ.get(LOG_LIMIT_ENV, "").strip()
    if not text:
        return DEFAULT_LOG_LIMIT_MB * 2**20
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = math.nan
    if not 1 <= megabytes <= MAX_LOG_LIMIT_MB:  # NaN too
        raise errors.UsageError(
            f"{LOG_LIMIT_ENV}={text[:40]!r}: not a number of MiB from 1 to "
            f"{MAX_LOG_LIMIT_MB} (the cap on each instance's log); unset it for "
            f"{DEFAULT_LOG_LIMIT_MB} MiB"
        )
    return int(megabytes * 2**20)


def _parent_gone(first_parent: int, supervisor: int) -> bool:
    # Reparented: the parent died. To the supervisor (a subreaper) it is only the warm
    # process this instance was forked from: the supervisor still records it.
    if os.getppid() not in (first_parent, supervisor):
        return True
    try:
        os.kill(supervisor, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, under another user (pid reused): rare, keep running
        return False
    return False


def watch_parent(environ: Mapping[str, str] | None = None) -> threading.Thread | None:
    """In an instance of ``jobs``: SIGKILL this process's group when its parent or the
    supervisor is gone. Nothing when not started by ``jobs`` (a plain ``milarun run`` may
    outlive its shell on purpose, e.g. under nohup)."""
    value = (os.environ if environ is None else environ).get(SUPERVISOR_ENV, "")
    if not value.isdigit():
        return None
    supervisor, first_parent = int(value), os.getppid()

    def watch() -> None:
        while not _parent_gone(first_parent, supervisor):
            time.sleep(WATCH_INTERVAL)
        # Nobody is left to record or reap this run: end it and its helpers (loader
        # workers share its process group; a torchrun rank kills only itself).
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="milarun-parent-watch", daemon=True)
    thread.start()
    return thread


def test_fault(where: str) -> None:
    """Tests only: MILARUN_TEST_SUPERVISOR_FAULT=<where> raises an error inside the
    supervisor, which nothing real provokes on demand. Never set outside the tests."""
    if os.environ.get("MILARUN_TEST_SUPERVISOR_FAULT") == where:
        raise RuntimeError(f"test fault in the supervisor ({where})")


def outdir_busy(outdir: Path) -> bool:
    """True while a live `jobs` holds ``outdir``'s lock (a shared try-lock fails)."""
    try:
        fd = os.open(Path(outdir) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


@contextmanager
def hold_outdir(outdir: Path) -> Iterator[Path]:
    """Hold ``<outdir>/.milarun.lock`` for the block; OutdirBusy when a live process holds
    it. flock is released by the kernel when the holder dies, so a killed run never leaves
    a stale lock; the file descriptor is not inherited by the instances (Python opens files
    non-inheritable), so an orphaned instance cannot keep it either."""
    path = Path(outdir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise errors.WriteError(f"{path}: cannot write ({err.strerror or err})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise OutdirBusy(
                f"output folder '{outdir}' is in use by another milarun jobs "
                f"(pid {holder}); wait for it or pass another -o"
            ) from err
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as err:
            raise errors.WriteError(f"{path}: cannot write ({err.strerror or err})") from None
        yield path
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would race)
