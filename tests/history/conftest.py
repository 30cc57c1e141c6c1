"""The results databases the history tests run against: ``db_url``, a fresh SQLite file or a
fresh database on a throw-away PostgreSQL server (``postgres_server``: scripts/postgres-dev.sh,
one for the session; skipped, with the reason, where it cannot start)."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "postgres-dev.sh"
# Every PostgreSQL test on one xdist worker, so that one server serves them all.
POSTGRES = pytest.param("postgresql", marks=pytest.mark.xdist_group(name="postgres"))
_names = itertools.count()


@pytest.fixture(scope="session")
def postgres_server():
    """The URL of a throw-away server for this session; skip (with why) when it cannot run."""
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        pytest.skip(
            "PostgreSQL is not installed (apt-get install --no-install-recommends postgresql)"
        )
    # the server's user (postgres, when we are root) must reach the folder: not under pytest's
    # private tmp folders
    top = Path(tempfile.mkdtemp(prefix="milarun-pg-"))
    top.chmod(0o755)
    env = {**os.environ, "MILARUN_POSTGRES_DEV": str(top / "server")}
    started = subprocess.run([SCRIPT, "up"], capture_output=True, text=True, env=env, timeout=120)
    if started.returncode != 0:
        shutil.rmtree(top, ignore_errors=True)
        pytest.skip(f"the throw-away PostgreSQL did not start: {started.stderr.strip()[-300:]}")
    try:
        yield started.stdout.strip()
    finally:
        subprocess.run([SCRIPT, "down"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(top, ignore_errors=True)


def _fresh_postgres(server: str) -> str:
    import psycopg

    base, _, _ = server.rpartition("/")
    name = f"t{os.getpid()}_{next(_names)}"
    plain = base.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(f"{plain}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{base}/{name}"


@pytest.fixture(params=["sqlite", POSTGRES])
def db_url(request, tmp_path) -> str:
    """A fresh, empty database: an SQLite file, or one on the throw-away PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.sqlite'}"
    return _fresh_postgres(request.getfixturevalue("postgres_server"))
