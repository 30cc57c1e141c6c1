"""Who holds an SQLite database's write lock, for the one line of an ingest that waited for it
in vain ("database is locked"): SQLite's locks are POSIX record locks on the database file
(rollback journal) or its ``-shm`` file (WAL), which the kernel lists in /proc/locks with the
pid that holds each."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
from sqlalchemy import Engine

LOCKS = Path("/proc/locks")
LOCKED = "database is locked"
MAX_LOCK_LINES = 100_000  # a machine's lock table is far smaller; bounded all the same


def _key(path: Path) -> str | None:
    """``maj:min:inode`` as /proc/locks writes a file (device numbers in hex)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"


def write_holders(database: Path, locks: Path = LOCKS) -> list[int]:
    """The pids (not this one) that hold a write lock on ``database`` or its ``-shm`` file."""
    keys = {k for k in (_key(database), _key(Path(f"{database}-shm"))) if k}
    pids: list[int] = []
    try:
        with open(locks, encoding="ascii", errors="replace") as f:
            for _, line in zip(range(MAX_LOCK_LINES), f):
                words = line.split()
                # "1: POSIX  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; "->" marks a waiter
                if len(words) < 6 or "->" in words or words[1] != "POSIX" or words[3] != "WRITE":
                    continue
                if words[5] in keys and words[4].isdigit():
                    pid = int(words[4])
                    if pid != os.getpid() and pid not in pids:
                        pids.append(pid)
    except OSError:
        return []
    return pids


def _command(pid: int) -> str:
    try:
        words = psutil.Process(pid).cmdline()
    except psutil.Error:
        return "gone since"
    shown = " ".join(" ".join(words).split())  # one line whatever its arguments hold
    if "milarun" in shown and " db " in f" {shown} " and "ingest" in words:
        return f"another milarun db ingest: {shown[:150]}"
    return shown[:150] or "no command line"


def explain(engine: Engine, message: str, waited_s: float) -> str:
    """What to add to a driver's "database is locked": the holder (pid and command) where
    /proc/locks names it, and the way out."""
    database = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    if LOCKED not in message or not database:
        return ""
    pids = write_holders(Path(database))
    waited = f"waited {waited_s:g} s"
    if not pids:
        return (
            f"; {waited} for another writer, which this machine does not list (another "
            "machine, over a network file system?): run this ingest again once it is done"
        )
    held = ", ".join(f"pid {pid} ({_command(pid)})" for pid in pids[:3])
    kill = " ".join(str(p) for p in pids[:3])
    return (
        f"; {waited} for its write lock, held by {held}: run this ingest again once that "
        f"ends (an ingest is never half-written), or stop it if it hangs (kill {kill})"
    )
