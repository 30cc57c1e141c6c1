"""The results server (FastAPI on uvicorn): pushes in, pages and JSON out.

Every write needs a key (milarun.server.keys) of the right scope: 401 without a valid one
(missing, unknown, expired, revoked), 403 with the wrong scope, 429 past the key's rate.
An upload is streamed to a spool file in bounded memory, its bytes and time bounded (413,
408), then verified and stored (milarun.server.intake) a few at a time. The database gone
is 503, a full disk 507: nothing is stored, and the client keeps its package.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import errno
import hashlib
import shutil
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from sqlalchemy import exc

from milarun.errors import DatabaseError, InputError
from milarun.history import store
from milarun.server import intake, keys, views
from milarun.server.models import ADMIN, PUSH, VISIBILITIES, Key, Site, Tender

MAX_TENDER_BYTES = 1 << 20
MAX_NAME = 255
SPOOL_CHUNK = 1 << 20


@dataclass(frozen=True)
class Settings:
    db: str | None
    root: Path  # packages, report pages, the spool and scratch folders
    limits: intake.Limits = field(default_factory=intake.Limits)
    pushes_per_minute: float = 60.0  # per key; a burst of as many
    verifiers: int = 2  # packages verified at once (CPU and disk bound)


class RateLimit:
    """A token bucket per key: ``per_minute`` writes, a burst of as many."""

    def __init__(self, per_minute: float):
        self.rate, self.burst = per_minute / 60.0, max(1.0, per_minute)
        self.buckets: dict[int, tuple[float, float]] = {}
        self.lock = threading.Lock()

    def take(self, key_id: int) -> float:
        """0 when allowed, else the seconds to wait."""
        with self.lock:
            now = time.monotonic()
            tokens, then = self.buckets.get(key_id, (self.burst, now))
            tokens = min(self.burst, tokens + (now - then) * self.rate)
            if tokens < 1:
                self.buckets[key_id] = (tokens, now)
                return (1 - tokens) / self.rate
            self.buckets[key_id] = (tokens - 1, now)
            return 0.0


def unauthorized(why: str) -> HTTPException:
    return HTTPException(401, why, headers={"WWW-Authenticate": "Bearer"})


def authorize(engine: Any, request: Request, scopes: tuple[str, ...]) -> Key:
    """The valid key the request carries, of one of ``scopes``."""
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("bearer "):
        raise unauthorized("no key: send 'Authorization: Bearer <key>' (milarun push does)")
    with store.session(engine) as session:
        key, why = keys.authenticate(session, header[7:].strip())
        if key is None:
            raise unauthorized(f"refused: {why}")
        if key.scope not in scopes:
            raise HTTPException(
                403, f"key {key.prefix} is a {key.scope} key: this needs {scopes[-1]}"
            )
        session.expunge(key)
        return key


def push_of(
    name: str, tender: str | None, visibility: str, embargo: str | None, price: float | None
) -> intake.Push:
    """The push's parameters, checked (422 naming the one that is wrong)."""
    if not (0 < len(name) <= MAX_NAME and name.isprintable()):
        raise HTTPException(422, f"name: 1 to {MAX_NAME} printable characters")
    if tender is not None and not (0 < len(tender) <= MAX_NAME and tender.isprintable()):
        raise HTTPException(422, f"tender: 1 to {MAX_NAME} printable characters")
    if visibility not in VISIBILITIES:
        raise HTTPException(422, f"visibility {visibility[:40]!r}: use {', '.join(VISIBILITIES)}")
    until = None
    if visibility == "embargoed":
        try:
            moment = dt.datetime.fromisoformat(embargo or "")
        except ValueError:
            raise HTTPException(422, "embargoed: give embargo=DATE (2027-01-31)") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.timezone.utc)
        until = moment.timestamp()
    if price is not None and not (0 < price < 1e12):
        raise HTTPException(422, f"price {price}: a positive number of dollars")
    return intake.Push(name, tender, visibility, until, price)


class TooLarge(Exception):
    pass


async def spool(
    chunks: AsyncIterator[bytes], dest: Path, limit: int, seconds: float
) -> tuple[str, int]:
    """Write the body to ``dest`` as it comes, within ``seconds`` (a client that stalls
    included: TimeoutError); its SHA-256 and size."""
    digest, size = hashlib.sha256(), 0
    async with asyncio.timeout(seconds):
        with open(dest, "wb") as out:
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise TooLarge
                digest.update(chunk)
                out.write(chunk)
    return digest.hexdigest(), size


def create_app(settings: Settings) -> FastAPI:
    """The app over the database ``settings.db`` (opened, its schema brought up to date)."""
    engine = store.open_db(settings.db)
    root = settings.root
    for folder in ("spool", "packages", "pages", "work"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for stale in (root / "spool").glob("*.part"):  # an upload cut by a crash: never stored
        stale.unlink(missing_ok=True)
    for stale in (root / "work").iterdir():
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink()
    limiter = RateLimit(settings.pushes_per_minute)
    verifying = asyncio.Semaphore(settings.verifiers)
    app = FastAPI(title="milarun results server", docs_url=None, redoc_url=None)
    app.state.engine, app.state.root = engine, root

    @app.exception_handler(DatabaseError)
    @app.exception_handler(exc.OperationalError)
    @app.exception_handler(exc.InterfaceError)
    async def database_down(_: Request, err: Exception) -> JSONResponse:
        line = store.one_line(err) if isinstance(err, exc.SQLAlchemyError) else str(err)
        return JSONResponse({"detail": f"database unavailable: {line[:300]}"}, status_code=503)

    @app.exception_handler(intake.Refused)
    async def refused(_: Request, err: intake.Refused) -> JSONResponse:
        return JSONResponse({"detail": str(err)[:2000]}, status_code=err.status)

    @app.exception_handler(OSError)
    async def disk(_: Request, err: OSError) -> JSONResponse:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            return JSONResponse(
                {"detail": "the server's disk is full: nothing stored; retry later"},
                status_code=507,
            )
        raise err

    def limited(key: Key) -> None:
        wait = limiter.take(key.id)
        if wait:
            raise HTTPException(
                429,
                f"key {key.prefix}: too many writes; retry in {wait:.0f} s",
                headers={"Retry-After": str(max(1, round(wait)))},
            )

    @app.post("/api/uploads")
    async def upload(
        request: Request,
        name: str = "package",
        tender: str | None = None,
        visibility: str = "public",
        embargo: str | None = None,
        price: float | None = None,
    ) -> JSONResponse:
        key = await run_in_threadpool(authorize, engine, request, (PUSH, ADMIN))
        limited(key)
        push = push_of(name, tender, visibility, embargo, price)
        limits = settings.limits
        claimed = request.headers.get("x-content-sha256", "")
        if len(claimed) == 64:  # the same bytes, pushed before by this site: not read again
            again = await run_in_threadpool(intake.known, engine, claimed.lower(), key.site_id)
            if again is not None:
                return JSONResponse(again, status_code=200)
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limits.upload_bytes):
            raise HTTPException(
                413, f"upload of {length} bytes: the limit is {limits.upload_bytes:,} bytes"
            )
        spooled = root / "spool" / f"{uuid.uuid4().hex}.part"
        try:
            try:
                found, size = await spool(
                    request.stream(), spooled, limits.upload_bytes, limits.upload_seconds
                )
            except TooLarge:
                raise HTTPException(
                    413, f"upload over the limit of {limits.upload_bytes:,} bytes"
                ) from None
            except TimeoutError:
                raise HTTPException(
                    408, f"upload slower than {limits.upload_seconds:.0f} s: refused"
                ) from None
            if not size:
                raise HTTPException(422, "empty upload: send a bid package (bid.tar.gz)")
            if len(claimed) == 64 and claimed.lower() != found:
                raise HTTPException(
                    422, "the bytes received do not hash to X-Content-SHA256: resend"
                )
            async with verifying:
                answer = await run_in_threadpool(
                    intake.receive, engine, root, spooled, found, key, push, limits
                )
        finally:
            spooled.unlink(missing_ok=True)
        return JSONResponse(answer, status_code=200 if answer["already_there"] else 201)

    @app.get("/api/push/{content_hash}")
    def before_push(request: Request, content_hash: str) -> dict[str, Any]:
        """What a client asks before it sends: whether its site pushed these bytes already,
        and the largest upload taken (a body refused half-sent is a broken pipe to it)."""
        key = authorize(engine, request, (PUSH, ADMIN))
        return {
            "upload": intake.known(engine, content_hash.lower()[:64], key.site_id),
            "limit_bytes": settings.limits.upload_bytes,
        }

    @app.post("/api/tenders")
    async def add_tender(request: Request, name: str) -> JSONResponse:
        key = await run_in_threadpool(authorize, engine, request, (ADMIN,))
        limited(key)
        if not (0 < len(name) <= MAX_NAME and name.isprintable()):
            raise HTTPException(422, f"name: 1 to {MAX_NAME} printable characters")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_TENDER_BYTES:
                raise HTTPException(413, f"a tender file is at most {MAX_TENDER_BYTES:,} bytes")
        return await run_in_threadpool(_store_tender, engine, root, key, name, body)

    @app.get("/api/keys")
    def own_keys(request: Request) -> list[dict[str, Any]]:
        key = authorize(engine, request, (PUSH, ADMIN))
        with store.session(engine) as session:
            return keys.listed(session, site=session.get(Site, key.site_id).name)  # type: ignore[union-attr]

    @app.get("/healthz")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    views.add_routes(app, engine, root)
    return app


def _store_tender(engine: Any, root: Path, key: Key, name: str, body: bytes) -> JSONResponse:
    from milarun.tender import rules

    path = root / "work" / f"tender-{uuid.uuid4().hex}.json"
    path.write_bytes(body)
    try:
        tender = rules.load_tender(path)
    except InputError as err:
        raise HTTPException(422, str(err).replace(str(path), name)[:500]) from None
    finally:
        path.unlink(missing_ok=True)
    with store.session(engine) as session, session.begin():
        if (
            session.query(Tender)
            .filter((Tender.name == name) | (Tender.sha256 == tender.sha256))
            .first()
        ):
            raise HTTPException(409, f"tender {name[:80]!r} (or these same rules) is already there")
        session.add(
            Tender(
                name=name,
                sha256=tender.sha256,
                body=body.decode(),
                site_id=key.site_id,
                created_at=time.time(),
            )
        )
    return JSONResponse(
        {"tender": name, "sha256": tender.sha256, "url": f"/tenders/{name}"}, status_code=201
    )
