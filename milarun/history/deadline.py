"""A deadline on every call to a PostgreSQL server, kept by the client.

A server that froze (SIGSTOP, a hung host, a storage stall) keeps its TCP connections open
and its kernel acknowledges what is sent: the connect timeout, TCP keepalives and the
server's own statement_timeout all wait for ever on a server that runs no code. So each
statement, commit and rollback runs under a deadline kept here: past it, one watchdog thread
shuts the connection's socket down, the driver's wait returns with an error, and the call
raises a DatabaseError that says so. The transaction it was part of was never committed
(a commit that got no answer is said to be unknown: an ingest again is safe, results are
known by their content hash).

The libpq options beside it (store.open_db): connect_timeout, keepalives (a host gone from
the network, on an idle connection) and statement_timeout (a server alive but stuck, e.g.
on a lock) end those cases on the server's side, each within the same stated time.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine

from milarun.errors import DatabaseError

ENV = "MILARUN_DB_TIMEOUT"
SECONDS = 60.0  # a database call's deadline, unless $MILARUN_DB_TIMEOUT says otherwise


def seconds() -> float:
    """The deadline of one database call: $MILARUN_DB_TIMEOUT (seconds) else SECONDS."""
    text = os.environ.get(ENV)
    if not text:
        return SECONDS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86_400:
        raise DatabaseError(f"${ENV}={text[:40]!r}: give the seconds a database call may take")
    return value


class _Watchdog:
    """One thread for every armed call: (socket fd -> deadline); a call past its deadline
    has its socket shut down (SHUT_RDWR on a duplicate of the fd: the driver's own stays
    open, so no fd number is ever reused under it)."""

    def __init__(self) -> None:
        self._armed: dict[int, tuple[float, int]] = {}  # token -> (deadline, fd)
        self._fired: set[int] = set()
        self._tokens = iter(range(1, 2**62))
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, fd: int, seconds: float) -> int:
        with self._wake:
            token = next(self._tokens)
            self._armed[token] = (time.monotonic() + seconds, fd)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="milarun-db-deadline", daemon=True
                )
                self._thread.start()
            self._wake.notify()
        return token

    def disarm(self, token: int) -> bool:
        """Stop watching the call; whether its deadline had fired."""
        with self._wake:
            self._armed.pop(token, None)
            fired = token in self._fired
            self._fired.discard(token)
        return fired

    def _run(self) -> None:
        with self._wake:
            while True:
                now = time.monotonic()
                for token, (deadline, fd) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[token]
                        self._fired.add(token)
                        _shut(fd)
                soonest = min((d for d, _ in self._armed.values()), default=now + 3600)
                self._wake.wait(max(0.01, soonest - now))


def _shut(fd: int) -> None:
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: the call has its answer


_watchdog = _Watchdog()


# The connections whose deadline fired (their socket is shut down), each kept by its libpq
# handle (held here, so that its id is no other's): a rollback on one is not sent (the server
# rolls back what a lost connection began), so that it does not hide the deadline's error.
_dead: dict[int, Any] = {}


@contextmanager
def _call(dbapi_connection: Any, what: str, limit: float, url: str) -> Iterator[bool]:
    """Run a call under the deadline; yields False where the call is not to be made (a
    rollback on a connection already lost to its deadline)."""
    pgconn = getattr(dbapi_connection, "pgconn", None)  # libpq's handle (psycopg)
    error = DatabaseError(
        f"--db {url}: the server did not answer a {what} within {limit:g} s (frozen, or "
        "unreachable?): the transaction was not completed"
        + " (whether it was stored is unknown: run it again)" * (what == "commit")
        + f"; check the server, or raise ${ENV}"
    )
    if pgconn is not None and id(pgconn) in _dead:
        if what == "rollback":
            yield False
            return
        raise error
    try:
        fd = int(pgconn.socket) if pgconn is not None else -1
    except Exception:  # closed: the driver says so itself
        fd = -1
    if fd < 0:
        yield True
        return
    token = _watchdog.arm(fd, limit)
    try:
        yield True
    except Exception:
        if _watchdog.disarm(token):
            _dead[id(pgconn)] = pgconn
            raise error from None
        raise
    else:
        _watchdog.disarm(token)


def guard(engine: Engine, url: str, limit: float) -> None:
    """Put every statement, commit and rollback of ``engine`` (PostgreSQL) under a deadline
    of ``limit`` seconds; ``url``: the database as errors name it (no password)."""
    dialect = engine.dialect

    def wrap(name: str, what: str, connection_of: Callable[[Any], Any]) -> None:
        original = getattr(dialect, name)

        def guarded(first: Any, *args: Any, **kwargs: Any) -> Any:
            with _call(connection_of(first), what, limit, url) as send:
                return original(first, *args, **kwargs) if send else None

        setattr(dialect, name, guarded)  # this engine's dialect only

    for name in ("do_execute", "do_executemany", "do_execute_no_params"):
        wrap(name, "statement", lambda cursor: cursor.connection)
    wrap("do_commit", "commit", lambda conn: conn)
    wrap("do_rollback", "rollback", lambda conn: conn)
