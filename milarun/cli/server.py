"""`milarun serve` (and `serve keys add|list|revoke`) and `milarun push` (coleo): parse,
call milarun.server, print. FastAPI and uvicorn are imported when `serve` runs."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path
from typing import Any

from coleo import Option, default, tooled

from milarun import errors
from milarun.cli.options import no_test_args


def data_root() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "milarun" / "server"


@tooled
def _db() -> str | None:
    # The results database: an SQLAlchemy URL or an SQLite file (default: $MILARUN_DB, then
    # history.sqlite in the user's data folder)
    db: Option & str = default(None)

    return db


def _session_of(db: str | None) -> Any:
    from milarun.history import store

    return store, store.open_db(db)


def _when(moment: float | None) -> str:
    if moment is None:
        return "-"
    return dt.datetime.fromtimestamp(moment, dt.timezone.utc).strftime("%Y-%m-%d")


def keys_add(test_args: list[str]) -> int:
    """Issue a key for a site (made when new); the key alone on the last line."""
    # The site the key pushes for (letters, digits, . _ -)
    site: Option & str
    # push (uploads) or admin (keys, tenders)
    scope: Option & str = default("push")
    # Uploads with this key are the official tier
    official: Option & bool = default(False)
    # The key stops working on this date (UTC), e.g. 2027-01-31
    expires: Option & str = default(None)

    from milarun.server import keys

    no_test_args("serve keys add", test_args)
    store, engine = _session_of(_db())
    try:
        with store.session(engine) as session, session.begin():
            issued = keys.add(session, site, scope, official, keys.parse_expiry(expires))
    finally:
        engine.dispose()
    tier = "official" if official else "community"
    print(
        f"{issued.scope} key {issued.prefix} for site {issued.site} ({tier}, expires "
        f"{expires or 'never'}); shown once, only its hash is kept:"
    )
    print(issued.key)
    return 0


def keys_list(test_args: list[str]) -> int:
    """The keys by prefix (never a secret): site, scope, tier, state."""
    # Only this site's keys
    site: Option & str = default(None)

    from milarun.server import keys

    no_test_args("serve keys list", test_args)
    store, engine = _session_of(_db())
    try:
        with store.session(engine) as session:
            rows = keys.listed(session, site)
    finally:
        engine.dispose()
    for row in rows:
        print(
            f"{row['prefix']}  {row['site']:<20} {row['scope']:<6} "
            f"{'official ' if row['official'] else 'community'} {row['state']:<8} "
            f"created {_when(row['created_at'])} expires {_when(row['expires_at'])}"
        )
    if not rows:
        print("no key")
    return 0


def keys_revoke(test_args: list[str]) -> int:
    """Revoke a key (by its prefix): refused from now on; what it pushed stays."""
    # The key's prefix (as `serve keys list` shows it)
    # [positional]
    prefix: Option & str

    from milarun.server import keys

    no_test_args("serve keys revoke", test_args)
    store, engine = _session_of(_db())
    try:
        with store.session(engine) as session, session.begin():
            key = keys.revoke(session, prefix)
            print(f"key {key.prefix} revoked")
    finally:
        engine.dispose()
    return 0


def serve_command(test_args: list[str]) -> int:
    """Start the results server (FastAPI on uvicorn); Ctrl-C stops it."""
    # Address to listen on (put a TLS reverse proxy in front for anything but loopback)
    host: Option & str = default("127.0.0.1")
    # Port to listen on
    port: Option & int = default(8000)
    # Folder of the pushed packages and report pages (default: the user's data folder)
    root: Option & str = default(None)
    # Largest upload accepted, in MiB
    max_upload_mb: Option & int = default(512)
    # Seconds an upload may take to arrive (a stalled client is cut)
    upload_seconds: Option & float = default(600.0)
    # Writes a key may make per minute
    pushes_per_minute: Option & float = default(60.0)

    import uvicorn

    from milarun.server import app, intake, keys

    no_test_args("serve", test_args)
    if not (0 < port < 65536 and 0 < max_upload_mb <= 1 << 20 and pushes_per_minute > 0):
        raise errors.UsageError("--port 1-65535, --max-upload-mb and --pushes-per-minute > 0")
    if not 0 < upload_seconds <= 86400:
        raise errors.UsageError(f"--upload-seconds {upload_seconds}: from 0 to 86400")
    db = _db()
    settings = app.Settings(
        db=db,
        root=Path(root) if root else data_root(),
        limits=intake.Limits(upload_bytes=max_upload_mb << 20, upload_seconds=upload_seconds),
        pushes_per_minute=pushes_per_minute,
    )
    server_app = app.create_app(settings)
    store, engine = _session_of(db)
    try:
        with store.session(engine) as session, session.begin():
            first = keys.ensure_admin(session)
        print(f"database: {store.shown(str(engine.url))}; packages in {settings.root}")
    finally:
        engine.dispose()
    if first is not None:
        print(f"admin key for site {first.site} (shown once; `milarun serve keys add` makes more):")
        print(first.key)
    print(f"milarun results server on http://{host}:{port}/", flush=True)
    uvicorn.run(server_app, host=host, port=port, log_level="warning")
    return 0


SERVE = {
    "__doc__": "The results server: serve, and its keys (add, list, revoke).",
    "__main__": serve_command,
    "keys": {
        "__doc__": "Push and admin keys: issued by an admin, shown once, stored hashed.",
        "add": keys_add,
        "list": keys_list,
        "revoke": keys_revoke,
    },
}


def push(test_args: list[str]) -> int:
    """Push a results folder or a bid package to a results server (key: $MILARUN_KEY)."""
    # The results folder (packed as a bid package) or bid package (bid.tar.gz)
    # [positional]
    source: Option
    # The server, e.g. https://results.example.org
    server: Option & str
    # A file holding the key (default: $MILARUN_KEY)
    key_file: Option & str = default(None)
    # A bid: the name of the tender (on the server) it answers
    tender: Option & str = default(None)
    # public, private (seen by its share link only) or embargoed (public from --embargo)
    visibility: Option & str = default("public")
    # Public from this date (UTC) on, with --visibility embargoed
    embargo: Option & str = default(None)
    # A bid's price in dollars (the ranking's price/score and TCO)
    price: Option & float = default(None)
    # Tries after the first when the connection is lost or the server is away
    retries: Option & int = default(5)

    no_test_args("push", test_args)
    if not server.startswith(("http://", "https://")):
        raise errors.UsageError(f"--server {server[:80]}: give a URL, http(s)://host:port")
    asked = {"visibility": visibility, "tender": tender, "embargo": embargo, "price": price}
    return push_to(Path(source), server, key_file, asked, retries)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Progress:
    """The push's progress on stderr, every tenth."""

    def __init__(self, name: str):
        self.name, self.shown = name, -1

    def __call__(self, sent: int, size: int) -> None:
        percent = 100 * sent // max(size, 1)
        if percent // 10 != self.shown // 10 or sent == size:
            self.shown = percent
            end = "\n" if sent == size else ""
            print(
                f"\rpushing {self.name[:60]}: {percent}% of {size / 2**20:,.1f} MiB",
                end=end,
                file=sys.stderr,
                flush=True,
            )


def push_to(
    source: Path, server: str, key_file: str | None, params: dict[str, Any], retries: int
) -> int:
    from milarun.server import client

    key = client.read_key(key_file)
    package = client.package_of(source, _say)
    name = source.resolve().name.removesuffix(".tar.gz") or "package"
    params = {"name": name[:255], **{k: v for k, v in params.items() if v is not None}}
    target = client.Target(server, key, params)
    answer = client.push(package, target, _say, Progress(name), retries)
    url = server.rstrip("/") + (answer.get("share") or answer["url"])
    if answer.get("already_there"):
        print(f"already there ({answer['status']}): nothing pushed twice; {url}")
    else:
        print(f"{answer['kind']} {answer['status']}: {url}")
    if answer["status"] != "accepted":
        print(f"why: {answer['reason']}")
        return 1
    return 0
