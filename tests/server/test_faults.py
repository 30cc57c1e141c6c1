"""Faults: the server killed during an upload (the client's retry completes it, nothing half
stored), the database unreachable (503, the client keeps its package and says so), the
server's disk full (507, nothing stored). The scenarios are serverkit's, which
benchmarks/server_load.py runs too."""

from __future__ import annotations

import pytest

import serverkit
from history.conftest import POSTGRES, _fresh_postgres
from serverkit import Server


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    top = tmp_path_factory.mktemp("package")
    return serverkit.package(serverkit.run_folder(top / "run", seed=11), top / "run.tar.gz")


@pytest.mark.slow
def test_a_server_killed_mid_upload_stores_nothing_and_the_retry_completes(server, package):
    ok, said = serverkit.killed_mid_upload(server, package, server.key("lab-k"))
    assert ok, said


@pytest.mark.slow
@pytest.mark.parametrize("backend", [POSTGRES])
def test_the_database_unreachable_is_503_and_the_client_keeps_its_package(
    backend, request, tmp_path, package
):
    import psycopg

    url = _fresh_postgres(request.getfixturevalue("postgres_server"))
    base, _, name = url.rpartition("/")
    admin = base.replace("postgresql+psycopg://", "postgresql://") + "/postgres"

    def sql(statement: str) -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(statement)

    def cut() -> None:  # no new connection, and the server's own ones closed
        sql(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")

    server = Server(url, tmp_path / "root").start()
    try:
        ok, said = serverkit.database_unreachable(
            server,
            package,
            server.key("lab-d"),
            cut,
            lambda: sql(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true"),
        )
    finally:
        server.stop()
    assert ok, said


@pytest.mark.slow
@pytest.mark.root("a tmpfs mount")
def test_a_full_disk_is_507_and_nothing_is_stored(tmp_path, package):
    db = f"sqlite:///{tmp_path / 'results.sqlite'}"
    ok, said = serverkit.disk_full_on_tmpfs(tmp_path / "root", db, package)
    assert ok, said
