"""Opening the results database: its URL, the engine, and the schema brought up to date.

``--db`` takes any SQLAlchemy URL (``postgresql+psycopg://user@host/db``) or a file path
(an SQLite file); without it, ``$MILARUN_DB``, else ``history.sqlite`` in the user's data
folder. Alembic's migrations (milarun/history/migrations) run at open, under a lock (SQLite:
its write lock; PostgreSQL: an advisory lock), so two milaruns opening a new database at
once make the schema once. A database whose schema revision this milarun does not know was
written by a newer one: refused, never downgraded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
from sqlalchemy import Engine, create_engine, event, exc, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from milarun.errors import DatabaseError
from milarun.history import deadline

MIGRATIONS = Path(__file__).parent / "migrations"
DEFAULT_FILE = "history.sqlite"
ENV = "MILARUN_DB"
BUSY_MS = 60_000  # how long an SQLite writer waits for another's transaction
CONNECT_S = 10  # seconds PostgreSQL has to answer a connection
_PG_LOCK = 0x6D696C61  # "mila": the advisory lock the migrations run under
WRITES = "milarun_writes"  # the execution option of a writing transaction
HEAD = "0005"  # the newest revision in migrations/versions (tests check it is Alembic's head)


# SQLite's errors for a file that is not (or no longer) a whole database, and what to do
DAMAGED = ("database disk image is malformed", "file is not a database")
DAMAGED_FIX = (
    "the file is damaged: `sqlite3 FILE .recover | sqlite3 NEW` salvages what it can, or "
    "`milarun db ingest` the results folders into a new file"
)


def default_db() -> str:
    """$MILARUN_DB, else history.sqlite in the user's data folder."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return str(Path(base) / "milarun" / DEFAULT_FILE)


def url_of(spec: str | None) -> str:
    """An SQLAlchemy URL: ``spec`` when it is one, else the SQLite file it names."""
    spec = spec or default_db()
    if "://" in spec:
        return spec
    return f"sqlite:///{Path(spec).expanduser().resolve()}"


def shown(url: str) -> str:
    """The URL as messages print it: without its password."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return url[:200]


def _sqlite_setup(engine: Engine, read_only: bool = False) -> None:
    """Foreign keys on, a busy wait instead of 'database is locked', WAL so readers do not
    wait on a writer (not set on a file opened read-only), and BEGIN IMMEDIATE for a writer
    (``writer(engine)``): its transaction takes the write lock at once, so two ingests queue
    rather than fail when both try to write what each one read."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi: Any, _record: Any) -> None:
        dbapi.isolation_level = None  # the BEGIN below, not the driver's own
        cursor = dbapi.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_MS}")
        if not read_only:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        writes = conn.get_execution_options().get(WRITES, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


def writer(engine: Engine) -> Engine:
    """The engine for a transaction that writes (SQLite: BEGIN IMMEDIATE)."""
    return engine.execution_options(**{WRITES: True})


def open_db(spec: str | None, create: bool = True) -> Engine:
    """The engine of the database ``spec`` names, its schema up to date; a DatabaseError
    (one line, the URL without password) when it cannot be opened or is not ours.
    ``create=False`` (a command that only reads): an SQLite file that is not there is an
    error, never made with its folders; one that cannot be written (a read-only copy) is
    read as it is."""
    url = url_of(spec)
    opened, read_only, connect = url, False, {}
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database:
            path = Path(parsed.database)
            if not create and not path.is_file():
                raise DatabaseError(
                    f"--db {shown(url)}: no such database; `milarun db ingest FOLDER` makes "
                    f"it (the default: {shown(url_of(None))})"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            read_only = _unwritable(path)
            if read_only and create:
                raise DatabaseError(
                    f"--db {shown(url)}: read-only (the file or its folder cannot be written): "
                    "ingest into a database you can write"
                )
            opened = _read_only_url(path) if read_only else url
        elif parsed.get_backend_name() == "postgresql":
            connect = _postgres_options(parsed.query, deadline.seconds())
        # orjson: a year's history of one test decodes 125k JSON cells (steady slices)
        engine = create_engine(
            opened,
            json_serializer=lambda value: orjson.dumps(value).decode(),
            json_deserializer=orjson.loads,
            connect_args=connect,
        )
    except (exc.ArgumentError, exc.NoSuchModuleError, ImportError, OSError) as err:
        raise DatabaseError(f"--db {shown(url)}: not a database URL ({err})") from None
    if engine.dialect.name == "sqlite":
        _sqlite_setup(engine, read_only)
    elif engine.dialect.name == "postgresql":  # a frozen server: an error, not a hang
        deadline.guard(engine, shown(url), deadline.seconds())
    try:
        migrate(engine)
    except exc.SQLAlchemyError as err:
        engine.dispose()
        raise DatabaseError(f"--db {shown(url)}: cannot open ({one_line(err)})") from None
    return engine


def _postgres_options(query: Any, limit: float) -> dict[str, Any]:
    """libpq's timeouts, each unless the URL sets it: CONNECT_S to connect; keepalives that
    give a peer gone from the network up within about ``limit`` (idle), and as long for sent
    data to be acknowledged (tcp_user_timeout, ms); statement_timeout (ms) for a server that
    is alive but stuck. A server that froze is the client's deadline (milarun.history.deadline)."""
    idle = max(1, int(limit / 2))
    options = {
        "connect_timeout": CONNECT_S,
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": max(1, int(limit / 6)),
        "keepalives_count": 3,
        "tcp_user_timeout": int(limit * 1000),
        "options": f"-c statement_timeout={int(limit * 1000)}",
    }
    return {k: v for k, v in options.items() if k not in query}


def _unwritable(path: Path) -> bool:
    """Whether SQLite cannot write ``path`` (or, WAL, its folder): a read-only filesystem
    or permissions (access(2) answers EROFS to root too)."""
    return (path.exists() and not os.access(path, os.W_OK)) or not os.access(path.parent, os.W_OK)


def _read_only_url(path: Path) -> str:
    """An SQLite URI that reads ``path`` without writing beside it: immutable (no -shm to
    make) unless a write-ahead log holds transactions not yet in the file."""
    wal = path.with_name(path.name + "-wal")
    pending = wal.exists() and wal.stat().st_size > 0
    return f"sqlite:///file:{quote(str(path))}?mode=ro{'' if pending else '&immutable=1'}&uri=true"


def one_line(err: BaseException) -> str:
    """A driver's error as one line (its first), without the SQL it ran; SQLite's words
    for a damaged file say what to do."""
    found = getattr(err, "orig", None) or err
    line = (str(found).strip().splitlines() or [type(found).__name__])[0][:300]
    if any(words in line for words in DAMAGED):
        line += f"; {DAMAGED_FIX}"
    return line


def migrate(engine: Engine) -> None:
    """Bring the schema to this milarun's head revision; refuse a newer one."""
    if _revision(engine) == HEAD:
        return  # up to date: Alembic (a second to import) is not needed
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(MIGRATIONS))
    known = {r.revision for r in script.walk_revisions()}
    with writer(engine).begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
        current = MigrationContext.configure(conn).get_current_revision()
        if current is not None and current not in known:
            raise DatabaseError(
                f"--db {shown(str(engine.url))}: its schema (revision {current}) was written by "
                "a newer milarun; upgrade milarun to read it"
            )
        if current in script.get_heads():
            return
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


def _revision(engine: Engine) -> str | None:
    """The schema revision the database records (None: none yet)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


@contextmanager
def session(engine: Engine) -> Iterator[Session]:
    """A session whose every error is a one-line DatabaseError."""
    try:
        with Session(engine) as found:
            yield found
    except exc.SQLAlchemyError as err:
        raise DatabaseError(f"--db {shown(str(engine.url))}: {one_line(err)}") from None
