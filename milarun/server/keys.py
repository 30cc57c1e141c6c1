"""Push and admin keys: made by an admin, shown once, stored hashed.

A key is ``mrk_<prefix>_<secret>``: the prefix (public, unique) finds its row, the whole key's
SHA-256 is all that is stored (a key is 256 random bits: a salted slow hash would add nothing
against guessing it, and every request checks one). Each key belongs to one site, has one
scope (push, or admin: keys and tenders), may be official (its uploads are the official
tier), may expire and may be revoked; a revoked key stays, so what it pushed still names it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from milarun.errors import UsageError
from milarun.server.models import ADMIN, SCOPES, Key, Site

PREFIX = "mrk"
SITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_KEY = re.compile(r"mrk_([A-Za-z0-9]{12})_([A-Za-z0-9_-]{43})")
ADMIN_SITE = "admin"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """(prefix, whole key)."""
    prefix = "".join(secrets.choice("abcdefghijkmnpqrstuvwxyz23456789") for _ in range(12))
    return prefix, f"{PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"


def check_site_name(name: str) -> str:
    if not SITE_NAME.fullmatch(name):
        raise UsageError(
            f"--site {name[:60]!r}: a site name is 1 to 64 letters, digits, '.', '_' or '-'"
        )
    return name


def parse_expiry(text: str | None) -> float | None:
    """An ISO date (UTC unless it names its zone) as a POSIX time; None: never."""
    if text is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--expires {text[:60]!r}: give a date such as 2027-01-31") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.timestamp()


def site_named(session: Session, name: str) -> Site:
    """The site ``name``, made when it is new."""
    site = session.scalar(select(Site).where(Site.name == name))
    if site is None:
        site = Site(name=name, created_at=time.time())
        session.add(site)
        session.flush()
    return site


@dataclass(frozen=True)
class Issued:
    key: str
    prefix: str
    site: str
    scope: str


def add(
    session: Session, site: str, scope: str, official: bool = False, expires_at: float | None = None
) -> Issued:
    """A new key for ``site`` (made when new); the caller commits and shows the key once."""
    if scope not in SCOPES:
        raise UsageError(f"--scope {scope[:40]!r}: use {' or '.join(SCOPES)}")
    if expires_at is not None and expires_at <= time.time():
        raise UsageError("--expires: that date is past; give a date to come")
    owner = site_named(session, check_site_name(site))
    prefix, key = new_key()
    session.add(
        Key(
            prefix=prefix,
            secret_hash=digest(key),
            site_id=owner.id,
            scope=scope,
            official=official,
            created_at=time.time(),
            expires_at=expires_at,
            revoked_at=None,
        )
    )
    session.flush()
    return Issued(key, prefix, owner.name, scope)


def ensure_admin(session: Session) -> Issued | None:
    """The first admin key, made when the database has no admin key at all (None: it has)."""
    if session.scalar(select(Key.id).where(Key.scope == ADMIN).limit(1)) is not None:
        return None
    return add(session, ADMIN_SITE, ADMIN, official=True)


def listed(session: Session, site: str | None = None) -> list[dict[str, Any]]:
    """The keys (prefixes, never secrets) of one site, or of every site for an admin."""
    query = select(Key, Site.name).join(Site).order_by(Site.name, Key.id)
    if site is not None:
        query = query.where(Site.name == site)
    now = time.time()
    return [
        {
            "prefix": key.prefix,
            "site": name,
            "scope": key.scope,
            "official": key.official,
            "created_at": key.created_at,
            "expires_at": key.expires_at,
            "state": state(key, now),
        }
        for key, name in session.execute(query).all()
    ]


def state(key: Key, now: float) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "valid"


def revoke(session: Session, prefix: str) -> Key:
    """Revoke the key with this prefix (the key itself or its prefix may be given)."""
    found = _KEY.fullmatch(prefix)
    wanted = found.group(1) if found else prefix
    key = session.scalar(select(Key).where(Key.prefix == wanted))
    if key is None:
        raise UsageError(f"no key with prefix {wanted[:40]!r}: `milarun serve keys list`")
    if key.revoked_at is None:
        key.revoked_at = time.time()
    return key


def authenticate(session: Session, presented: str) -> tuple[Key | None, str]:
    """The key ``presented`` names, if it is valid now, else None and why."""
    found = _KEY.fullmatch(presented)
    if not found:
        return None, "not a milarun key (mrk_<prefix>_<secret>)"
    key = session.scalar(select(Key).where(Key.prefix == found.group(1)))
    if key is None or not hmac.compare_digest(key.secret_hash, digest(presented)):
        return None, "unknown key"
    why = state(key, time.time())
    return (key, "") if why == "valid" else (None, f"key {key.prefix} is {why}")
