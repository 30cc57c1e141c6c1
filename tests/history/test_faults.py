"""The results database under the faults of benchmarks/faults_database.py (issue 40): a
read-only copy is read (and refused for writing in one line), a damaged SQLite file says what
to do, a PostgreSQL server that never answers is an error within seconds, not a hang."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, cli_env, milarun, one_line_error
from fullfs import read_only_tmpfs
from resultfactory import run_folder

T0 = 1_767_225_600.0  # 2026-01-01


@pytest.mark.root("mounts a tmpfs read-only")
def test_a_read_only_database_is_read_and_ingest_says_it_cannot_write(tmp_path):
    folder = run_folder(tmp_path / "run", {"quick.a": [100.0, 101.0]}, T0)

    def ingest(disk):
        assert milarun("db", "ingest", folder, "--db", disk / "h.sqlite").returncode == 0

    with read_only_tmpfs(tmp_path / "ro", ingest) as disk:
        db = disk / "h.sqlite"
        shown = milarun("history", "--db", db)
        assert shown.returncode == 0 and "quick.a @ node1" in shown.stdout, shown.stderr
        assert milarun("db", "regressions", "--db", db).returncode == 0
        line = one_line_error(milarun("db", "ingest", folder, "--db", db))
        assert str(db) in line and "read-only" in line
        assert sorted(p.name for p in disk.iterdir()) == ["h.sqlite"]  # nothing beside it


def test_a_damaged_sqlite_file_is_one_line_that_says_what_to_do(tmp_path):
    db = tmp_path / "h.sqlite"
    made = milarun("db", "ingest", run_folder(tmp_path / "r", {"quick.a": [1.0]}, T0), "--db", db)
    assert made.returncode == 0, made.stderr
    data = db.read_bytes()
    (tmp_path / "cut.sqlite").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.sqlite").write_bytes(os.urandom(8192))
    for name in ("cut.sqlite", "junk.sqlite"):
        line = one_line_error(milarun("history", "--db", tmp_path / name))
        assert name in line and "damaged" in line and ".recover" in line, line


def test_a_postgresql_server_that_never_answers_is_an_error_in_seconds(tmp_path):
    """A socket that accepts connections and never speaks (a frozen server): open_db gives
    up after CONNECT_S (made 1 s here), in one line; before, it waited for ever."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"postgresql+psycopg://u@127.0.0.1:{silent.getsockname()[1]}/db"
        code = textwrap.dedent(f"""
            from milarun.errors import DatabaseError
            from milarun.history import store
            store.CONNECT_S = 1
            try:
                store.open_db({url!r})
            except DatabaseError as err:
                print(err)
        """)
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=cli_env(),
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    assert "cannot open" in done.stdout and "timeout" in done.stdout, done.stdout + done.stderr
