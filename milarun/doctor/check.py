"""One line of `milarun doctor` and the words it may say: every doctor check, passive or
measured, is a :class:`Check` whose status is one of PASS, WARN, FAIL or INFO (this module's
constants, the only place they are written).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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


def as_root(words: str) -> str:
    """``milarun <words>`` as the operator types it with root's rights: this installation's
    own milarun script (the same under uv, Poetry or a plain venv, which `sudo` may not put on
    its PATH), after `sudo` where there is one and we are not root already."""
    script = Path(sys.executable).parent / "milarun"
    milarun = str(script) if script.exists() else f"{sys.executable} -m milarun"
    command = f"{milarun} {words}"
    if os.geteuid() == 0:
        return f"`{command}`"
    if shutil.which("sudo"):
        return f"`sudo {command}`"
    return f"`{command}` as root"
