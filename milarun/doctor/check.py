"""One line of `milarun doctor` and the words it may say: every doctor check, passive or
measured, is a :class:`Check` whose status is one of PASS, WARN, FAIL or INFO (this module's
constants, the only place they are written).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
INFO = "INFO"  # said for the operator's information, never a problem
STATUSES = (PASS, WARN, FAIL, INFO)  # what a record may hold, as a check's status or verdict
ORDER = {INFO: 0, PASS: 1, WARN: 2, FAIL: 3}


@dataclass(frozen=True)
class Check:
    """One line of `milarun doctor` (every doctor check returns these)."""

    name: str
    status: str  # PASS, WARN, FAIL or INFO
    detail: str
    fix: str | None = None  # what to do, for WARN and FAIL


def worst(statuses: Sequence[str]) -> str:
    """The gravest of ``statuses`` (INFO < PASS < WARN < FAIL); INFO when there is none."""
    return max(statuses, key=ORDER.__getitem__) if statuses else INFO
