"""A real results server per test module (`milarun serve` on a free loopback port, SQLite in
the module's folder), its admin key, and the PostgreSQL of the history tests."""

from __future__ import annotations

import pytest

from history.conftest import postgres_server  # noqa: F401 (the throw-away PostgreSQL)
from serverkit import Server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    top = tmp_path_factory.mktemp("server")
    running = Server(f"sqlite:///{top / 'results.sqlite'}", top / "root").start()
    try:
        yield running
    finally:
        running.stop()
