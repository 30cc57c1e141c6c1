"""What the server's pages show, read from the store: sites and their uploads, the runs, a
test across sites per GPU model, a tender's accepted bids. Only what may be seen: public
uploads, and embargoed ones once their date is past (a private one: by its share link).
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from milarun.history.models import Machine, Result, Run
from milarun.server.models import ACCEPTED, EMBARGOED, PUBLIC, Site, Tender, Upload

TIERS = ("official", "community")
MAX_ROWS = 5000  # rows a listing shows (the newest)


def visible(now: float | None = None) -> ColumnElement[bool]:
    now = time.time() if now is None else now
    return or_(
        Upload.visibility == PUBLIC,
        and_(Upload.visibility == EMBARGOED, Upload.embargo_until <= now),
    )


def _tier(query: Any, tier: str | None) -> Any:
    if tier is None:
        return query
    return query.where(Upload.official.is_(tier == "official"))


def upload_row(upload: Upload, site: str, tender: str | None = None) -> dict[str, Any]:
    return {
        "id": upload.content_hash,
        "site": site,
        "name": upload.name,
        "kind": upload.kind,
        "status": upload.status,
        "reason": upload.reason,
        "tier": "official" if upload.official else "community",
        "suite": upload.suite,
        "devices": ", ".join(upload.devices or []),
        "tender": tender,
        "score": upload.score,
        "price": upload.price,
        "run": upload.run_id,
        "pushed_at": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(upload.created_at)),
    }


def uploads(
    session: Session,
    *,
    site: str | None = None,
    tier: str | None = None,
    tender_id: int | None = None,
    accepted_only: bool = False,
) -> list[dict[str, Any]]:
    """The visible uploads, newest first."""
    query = (
        select(Upload, Site.name, Tender.name)
        .join(Site, Upload.site_id == Site.id)
        .outerjoin(Tender, Upload.tender_id == Tender.id)
        .where(visible())
        .order_by(Upload.created_at.desc(), Upload.id.desc())
        .limit(MAX_ROWS)
    )
    if site is not None:
        query = query.where(Site.name == site)
    if tender_id is not None:
        query = query.where(Upload.tender_id == tender_id)
    if accepted_only:
        query = query.where(Upload.status == ACCEPTED)
    return [upload_row(u, s, t) for u, s, t in session.execute(_tier(query, tier)).all()]


def runs(session: Session, tier: str | None = None) -> list[dict[str, Any]]:
    """The accepted, visible uploads that brought a run: `/api/runs`."""
    return [r for r in uploads(session, tier=tier, accepted_only=True) if r["run"] is not None]


def sites(session: Session) -> list[dict[str, Any]]:
    """Each site with its visible uploads counted."""
    counts = dict(
        session.execute(
            select(Upload.site_id, func.count()).where(visible()).group_by(Upload.site_id)
        ).all()
    )
    accepted = dict(
        session.execute(
            select(Upload.site_id, func.count())
            .where(visible(), Upload.status == ACCEPTED)
            .group_by(Upload.site_id)
        ).all()
    )
    return [
        {"site": s.name, "uploads": counts.get(s.id, 0), "accepted": accepted.get(s.id, 0)}
        for s in session.scalars(select(Site).order_by(Site.name))
        if counts.get(s.id)
    ]


def tests(session: Session) -> list[str]:
    """Every test with a visible, accepted result."""
    query = (
        select(Result.test)
        .join(Upload, Upload.run_id == Result.run_id)
        .where(visible(), Upload.status == ACCEPTED)
        .distinct()
        .order_by(Result.test)
        .limit(MAX_ROWS)
    )
    return list(session.scalars(query))


def _model(system: Any) -> str:
    gpus = system.get("gpus") if isinstance(system, dict) else None
    names = sorted({str(g.get("name")) for g in gpus or [] if isinstance(g, dict)})
    return " + ".join(names) if names else "CPU"


def test_across_sites(session: Session, test: str) -> dict[str, Any]:
    """A test's successful runs per GPU model and site: each site's mean rate, and per model
    the site-to-site spread (the slowest site's mean below the fastest's)."""
    query = (
        select(Result.id, Result.rate, Result.finished_at, Site.name, Machine.system)
        .join(Run, Result.run_id == Run.id)
        .join(Machine, Run.machine_id == Machine.id)
        .join(Upload, Upload.run_id == Run.id)
        .join(Site, Upload.site_id == Site.id)
        .where(
            Result.test == test,
            Result.success.is_(True),
            Result.rate.is_not(None),
            Upload.status == ACCEPTED,
            visible(),
        )
    )
    seen: set[int] = set()
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    latest: dict[tuple[str, str], float] = {}
    for result_id, rate, finished, site, system in session.execute(query).all():
        if result_id not in seen:  # a run pushed in two packages counts once
            seen.add(result_id)
            group = (_model(system), site)
            groups[group].append(float(rate))
            latest[group] = max(latest.get(group, 0.0), float(finished))
    rows: list[dict[str, Any]] = [
        {
            "gpu": model,
            "site": site,
            "n": len(rates),
            "mean": statistics.fmean(rates),
            "min": min(rates),
            "max": max(rates),
            "latest": time.strftime("%Y-%m-%d %H:%M", time.gmtime(latest[(model, site)])),
        }
        for (model, site), rates in sorted(groups.items())
    ]
    spread = []
    for model in sorted({r["gpu"] for r in rows}):
        means = [r["mean"] for r in rows if r["gpu"] == model]
        best = max(means)
        spread.append(
            {
                "gpu": model,
                "sites": len(means),
                "spread": (best - min(means)) / best if len(means) > 1 and best > 0 else None,
            }
        )
    return {"test": test, "sites": rows, "spread": spread}
