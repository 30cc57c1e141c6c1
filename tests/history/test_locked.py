"""A second ingest that waits in vain on a locked SQLite file (issue 50): its one line names
who holds the write lock (pid and command, from the kernel's lock table) and the way out.
The holder is a real process in a real write transaction; the wait is cut to 0.3 s here."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from milarun.errors import DatabaseError
from milarun.history import ingest, lockholder, store
from resultfactory import run_folder

T0 = 1_767_225_600.0  # 2026-01-01
HOLD = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT INTO machines (name) VALUES ('holder')")
print("holding", flush=True)
time.sleep(60)
"""


@pytest.fixture
def held(tmp_path):
    """A database of ours whose write lock another process holds (in WAL mode, as ours)."""
    path = tmp_path / "h.sqlite"
    engine = store.open_db(str(path))  # its schema made before the lock is taken
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
    yield path, holder, engine
    holder.kill()
    holder.wait()
    engine.dispose()


def test_the_lock_table_names_the_holder(held):
    path, holder, _ = held
    assert lockholder.write_holders(path) == [holder.pid]


def test_a_locked_database_names_its_holder_and_the_way_out(held, tmp_path, monkeypatch):
    _, holder, engine = held
    # a short wait, not 60 s: read as each connection opens, so the pooled ones go
    monkeypatch.setattr(store, "BUSY_MS", 300)
    engine.dispose()
    run = ingest.read_run(run_folder(tmp_path / "r1", {"quick.a": [100.0]}, T0))
    started = time.monotonic()
    with pytest.raises(DatabaseError) as err:
        ingest.ingest(engine, run)
    line = str(err.value)
    assert time.monotonic() - started < 30 and "\n" not in line
    assert "database is locked; waited 0.3 s for its write lock, held by " in line
    assert f"pid {holder.pid} ({sys.executable} -c" in line, line
    assert f"kill {holder.pid})" in line and "run this ingest again once that ends" in line


def test_no_holder_listed_says_so(tmp_path):
    engine = store.open_db(str(tmp_path / "free.sqlite"))
    said = lockholder.explain(engine, "database is locked", 60)
    assert said.startswith("; waited 60 s for another writer, which this machine does not list")
    assert lockholder.explain(engine, "no such table: x", 60) == ""
