"""An upload, from the spooled file to its stored verdict.

The package was streamed to disk (bounded: milarun.server.app); here it is extracted with
every member checked (milarun.tender.archive), verified (milarun.server.verdict), its run
ingested into the history store when it passed, and its row written. The content hash is
the upload's identity: a re-push of the same bytes is a no-op that says so. Append-only:
a push never changes nor deletes what is stored; a rejected upload is kept with its verify
report and never ranked. A failure half way (the server killed, the database gone) leaves
no row: the run's ingest is one transaction, and a retry completes what was begun.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, exc, select
from sqlalchemy.orm import Session

from milarun.errors import InputError
from milarun.history import ingest, store
from milarun.server import verdict
from milarun.server.models import ACCEPTED, BID, EMBARGOED, REJECTED, RUN, Key, Site, Tender, Upload
from milarun.tender import archive, package

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """What one upload may be: its bytes on the wire, its time, what its archive holds."""

    upload_bytes: int = 512 << 20
    upload_seconds: float = 600.0
    package: archive.Limits = field(
        default_factory=lambda: archive.Limits(
            members=50_000, member_bytes=256 << 20, total_bytes=4 << 30
        )
    )


@dataclass(frozen=True)
class Push:
    """What the client asked for its upload."""

    name: str
    tender: str | None = None
    visibility: str = "public"
    embargo_until: float | None = None
    price: float | None = None  # a bid's price in USD (the ranking's TCO)


class Refused(Exception):
    """An upload refused with an HTTP status and one line; nothing stored."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def described(upload: Upload, site: str, again: bool = False) -> dict[str, Any]:
    """The answer to a push (and the upload's JSON)."""
    return {
        "id": upload.content_hash,
        "name": upload.name,
        "site": site,
        "kind": upload.kind,
        "status": upload.status,
        "reason": upload.reason,
        "tier": "official" if upload.official else "community",
        "visibility": upload.visibility,
        "embargo_until": upload.embargo_until,
        "run": upload.run_id,
        "score": upload.score,
        "already_there": again,
        "url": f"/uploads/{upload.content_hash}",
        "share": f"/share/{upload.share_token}" if upload.visibility != "public" else None,
    }


def known(engine: Engine, content_hash: str, site_id: int | None = None) -> dict[str, Any] | None:
    """The upload of these bytes, if stored (of this site only, when one is given)."""
    query = (
        select(Upload, Site.name)
        .join(Site, Upload.site_id == Site.id)
        .where(Upload.content_hash == content_hash)
    )
    if site_id is not None:
        query = query.where(Upload.site_id == site_id)
    with store.session(engine) as session:
        found = session.execute(query).first()
        return described(found[0], found[1], again=True) if found else None


def _tender(session: Session, wanted: str | None, packed_sha: str | None) -> Tender | None:
    if wanted is not None:
        found = session.scalar(select(Tender).where(Tender.name == wanted))
        if found is None:
            raise Refused(
                404, f"no tender named {wanted[:80]!r} on this server: an admin uploads it"
            )
        return found
    if packed_sha:
        return session.scalar(select(Tender).where(Tender.sha256 == packed_sha))
    return None


def receive(
    engine: Engine,
    root: Path,
    spooled: Path,
    content_hash: str,
    key: Key,
    push: Push,
    limits: Limits,
) -> dict[str, Any]:
    """Verify and store the spooled package; the answer to the push."""
    again = known(engine, content_hash, key.site_id)
    if again is not None:
        return again
    if known(engine, content_hash) is not None:  # its share link is not this site's to see
        raise Refused(409, f"{push.name}: these bytes were pushed by another site: not stored")
    site = _site_name(engine, key.site_id)
    with verdict.scratch(root) as tmp:
        work = Path(tmp)
        try:
            opened = verdict.open_package(spooled, work / "package", limits.package)
        except InputError as err:
            raise Refused(422, str(err).replace(str(spooled), push.name)) from None
        if not verdict.has_run(opened):
            raise Refused(422, f"{push.name}: the package holds no milarun result")
        with store.session(engine) as session:
            tender = _tender(session, push.tender, verdict.packed_tender_sha(opened))
            tender_id, body = (tender.id, tender.body) if tender else (None, None)
        try:
            found = verdict.judge(spooled, opened, push.name, body, work)
        except InputError as err:
            found = verdict.PushVerdict(False, str(err)[:2000], {"error": str(err)[:2000]}, None)
        run = ingest.read_run(opened.root / package.RUN)
        run.machine = f"{site}/{run.machine}"[: ingest.MAX_MACHINE]
        run.source = f"push {content_hash}"
        run_id = ingest.ingest(engine, run).run_id if found.accepted else None
        like = verdict.like_key(run, opened)
        devices = verdict.devices_of(opened)
        if found.accepted:
            _report_page(opened, root / "pages" / f"{content_hash}.html", push.name)
    kept = root / "packages" / f"{content_hash}.tar.gz"
    kept.parent.mkdir(parents=True, exist_ok=True)
    os.replace(spooled, kept)
    upload = Upload(
        content_hash=content_hash,
        site_id=key.site_id,
        key_id=key.id,
        kind=BID if tender_id is not None else RUN,
        name=push.name[:255],
        status=ACCEPTED if found.accepted else REJECTED,
        reason=found.reason,
        official=key.official,
        visibility=push.visibility,
        embargo_until=push.embargo_until if push.visibility == EMBARGOED else None,
        share_token=secrets.token_urlsafe(32),
        tender_id=tender_id,
        run_id=run_id,
        suite=like.get("suite"),
        devices=devices,
        like_key=like,
        report=found.report,
        score=found.score,
        price=push.price,
        size=kept.stat().st_size,
        created_at=time.time(),
    )
    try:
        with Session(store.writer(engine)) as session, session.begin():
            session.add(upload)
            session.flush()
            return described(upload, site)
    except exc.IntegrityError:  # the same bytes pushed at the same time: the other one won
        again = known(engine, content_hash, key.site_id)
        if again is None:
            raise Refused(409, f"{push.name}: these bytes were pushed by another site") from None
        return again


def _site_name(engine: Engine, site_id: int) -> str:
    with store.session(engine) as session:
        return str(session.scalar(select(Site.name).where(Site.id == site_id)))


def _report_page(opened: Any, out: Path, title: str) -> None:
    """The run's report page, made once (the report's own page and charts)."""
    from milarun.report.request import ReportRequest, make_report

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        make_report(ReportRequest(opened.root / package.RUN, html=tmp, title=f"milarun: {title}"))
        os.replace(tmp, out)
    except Exception as err:  # noqa: BLE001 (the page is an extra: the upload stands without it)
        tmp.unlink(missing_ok=True)  # no page: the run page says so
        if not isinstance(err, InputError):
            log.warning("%s: no report page (%s: %s)", title, type(err).__name__, err)
