"""Issue 49: a PostgreSQL server that freezes during an ingest (every one of its processes
stopped, SIGSTOP: its kernel still acknowledges what is sent, so no TCP timeout fires) gives a
one-line error within the stated deadline ($MILARUN_DB_TIMEOUT), and nothing of the run is
stored once the server runs again. Before, `db ingest` waited for ever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, cli_env
from resultfactory import run_folder

from .conftest import _fresh_postgres

T0 = 1_767_225_600.0  # 2026-01-01
LIMIT = 3  # seconds: the deadline the child is given

pytestmark = pytest.mark.xdist_group(name="postgres")

CHILD = textwrap.dedent("""
    import sys, time
    from milarun.errors import DatabaseError
    from milarun.history import ingest, store
    url, folder = sys.argv[1], sys.argv[2]
    engine = store.open_db(url)
    with store.session(engine) as session:  # a pooled connection, its backend known
        backend = session.execute(store.text("SELECT pg_backend_pid()")).scalar()
    # said once the session is closed (its commit and the pool's rollback done): else the
    # server could be frozen during them, outside the ingest this test times
    print(backend, flush=True)
    sys.stdin.readline()  # the server is frozen now
    started = time.monotonic()
    try:
        ingest.ingest(engine, ingest.read_run(folder, "box"))
        print("ingested")
    except DatabaseError as err:
        print(f"{time.monotonic() - started:.1f} {err}")
""")


def server_processes(backend: int) -> list[int]:
    """The postmaster serving ``backend`` and every process it started."""
    postmaster = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            children.append(int(stat.parent.name))
    return [postmaster, *children]


def runs_stored(url: str) -> int:
    import psycopg

    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, connect_timeout=10) as conn:
        return conn.execute("SELECT count(*) FROM runs").fetchone()[0]


def test_a_frozen_server_is_an_error_within_the_deadline_and_nothing_is_stored(
    postgres_server, tmp_path
):
    url = _fresh_postgres(postgres_server)
    first = run_folder(tmp_path / "first", {"quick.a": [100.0, 101.0]}, T0)
    second = run_folder(tmp_path / "second", {"quick.a": [102.0, 99.0]}, T0 + 86_400)
    env = cli_env({"MILARUN_DB_TIMEOUT": str(LIMIT)})
    done = subprocess.run(
        [sys.executable, "-m", "milarun", "db", "ingest", first, "--db", url],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, str(second)],
        cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    frozen: list[int] = []
    try:
        assert child.stdout is not None and child.stdin is not None
        backend = int(child.stdout.readline())
        frozen = server_processes(backend)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=LIMIT + 30)  # before: for ever
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        child.kill()
    assert child.returncode == 0, err
    seconds, _, said = out.strip().partition(" ")
    assert LIMIT <= float(seconds) < LIMIT + 5, out
    assert "did not answer a statement within 3 s" in said and "not completed" in said, said
    assert "\n" not in said and "Traceback" not in err
    deadline = time.monotonic() + 30  # the server, running again, rolls the transaction back
    while runs_stored(url) != 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert runs_stored(url) == 1  # the first run only: nothing of the second
