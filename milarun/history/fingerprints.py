"""The fingerprint references in the results database: per device model and software stack,
the silent-data-corruption fingerprint the first clean `doctor --active` run gave
(milarun.doctor.active.judge_fingerprint reads and keeps them)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import select

from milarun.history import store
from milarun.history.models import FingerprintReference


@dataclass(frozen=True)
class Reference:
    stack: str
    fingerprint: str
    made_at: float
    made_on: str


def references(db: str | None, stacks: list[str]) -> dict[str, Reference]:
    """The references kept for these stacks (the database made if it is not there)."""
    engine = store.open_db(db)
    try:
        with store.session(engine) as session:
            rows = session.scalars(
                select(FingerprintReference).where(FingerprintReference.stack.in_(stacks))
            ).all()
            return {r.stack: Reference(r.stack, r.fingerprint, r.made_at, r.made_on) for r in rows}
    finally:
        engine.dispose()


def keep(db: str | None, found: dict[str, tuple[str, str]]) -> None:
    """Keep ``stack -> (fingerprint, made_on)`` for the stacks that have no reference yet
    (a reference is never replaced: a later run is judged against it)."""
    engine = store.open_db(db)
    try:
        with store.session(store.writer(engine)) as session, session.begin():
            kept = set(
                session.scalars(
                    select(FingerprintReference.stack).where(
                        FingerprintReference.stack.in_(list(found))
                    )
                ).all()
            )
            for stack, (fingerprint, made_on) in found.items():
                if stack not in kept:
                    session.add(
                        FingerprintReference(
                            stack=stack[:512],
                            fingerprint=fingerprint,
                            made_at=time.time(),
                            made_on=made_on[:255],
                        )
                    )
    finally:
        engine.dispose()
