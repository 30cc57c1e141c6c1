"""The results server's tables, beside the history's (same Base, same migrations:
milarun/history/migrations/versions/r0003_server.py).

A site (a lab, a vendor, a cluster) pushes with its keys; a key is stored as the SHA-256 of
its secret with a visible prefix (the only part ever shown again). Every push is an upload,
whatever its verdict: its content hash is its identity (a re-push is a no-op), a rejected one
keeps its verify report and is never ranked. A tender is the buyer's rules, uploaded by an
admin; bids name it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from milarun.history.models import HASH, Base, Run

PUSH, ADMIN = "push", "admin"
SCOPES = (PUSH, ADMIN)
ACCEPTED, REJECTED = "accepted", "rejected"
PUBLIC, PRIVATE, EMBARGOED = "public", "private", "embargoed"
VISIBILITIES = (PUBLIC, PRIVATE, EMBARGOED)
RUN, BID = "run", "bid"


class Site(Base):
    __tablename__ = "sites"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    created_at: Mapped[float] = mapped_column(Float)


class Key(Base):
    __tablename__ = "keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    prefix: Mapped[str] = mapped_column(String(32), unique=True)  # shown; finds the row
    secret_hash: Mapped[str] = mapped_column(String(HASH))  # sha256 of the whole key
    site_id: Mapped[int] = mapped_column(ForeignKey("sites.id"), index=True)
    scope: Mapped[str] = mapped_column(String(16))
    official: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)

    site: Mapped[Site] = relationship()


class Tender(Base):
    __tablename__ = "tenders"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    sha256: Mapped[str] = mapped_column(String(HASH), unique=True)
    body: Mapped[str] = mapped_column(Text)  # the tender file as uploaded
    site_id: Mapped[int] = mapped_column(ForeignKey("sites.id"))
    created_at: Mapped[float] = mapped_column(Float)


class Upload(Base):
    __tablename__ = "uploads"

    id: Mapped[int] = mapped_column(primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(HASH), unique=True)
    site_id: Mapped[int] = mapped_column(ForeignKey("sites.id"), index=True)
    key_id: Mapped[int] = mapped_column(ForeignKey("keys.id"))
    kind: Mapped[str] = mapped_column(String(8))  # run | bid
    name: Mapped[str] = mapped_column(String(255))  # what the client called it
    status: Mapped[str] = mapped_column(String(16))  # accepted | rejected
    reason: Mapped[str | None] = mapped_column(Text)  # why rejected, one line
    official: Mapped[bool] = mapped_column(Boolean)  # pushed with an official key
    visibility: Mapped[str] = mapped_column(String(16))
    embargo_until: Mapped[float | None] = mapped_column(Float)
    share_token: Mapped[str] = mapped_column(String(64), unique=True)
    tender_id: Mapped[int | None] = mapped_column(ForeignKey("tenders.id"), index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"), index=True)
    suite: Mapped[str | None] = mapped_column(String(255))
    devices: Mapped[list[str] | None] = mapped_column(JSON)
    like_key: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # like-with-like fields
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # the verify report
    score: Mapped[float | None] = mapped_column(Float)
    price: Mapped[float | None] = mapped_column(Float)  # a bid's price (USD), as declared
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float, index=True)

    site: Mapped[Site] = relationship()
    tender: Mapped[Tender | None] = relationship()
    run: Mapped[Run | None] = relationship()
