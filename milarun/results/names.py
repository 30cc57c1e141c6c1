"""Result file names: ``<name>.J<job_id>[.FAIL].<UTC %Y%m%d-%H%M%S-%f>.json`` (DESIGN
section 5), and the safe names they are made of."""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Any

from milarun.errors import InputError

# A name that becomes a path component (test name, job id): letters, digits and ._-, not
# starting with a dot, short enough that ``<name>.J<id>.FAIL.<stamp>.json`` (and the
# temporary file written before it) fits the 255 bytes of a file name.
MAX_NAME = 100
_SAFE_NAME_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def safe_name(value: Any, what: str, limit: int = MAX_NAME) -> str:
    """``value`` when it is a safe, bounded path component; else an InputError naming it."""
    shown = (
        repr(value)
        if not isinstance(value, str) or len(value) <= 60
        else repr(value[:60]) + f"... ({len(value)} characters)"
    )
    if not isinstance(value, str) or not _SAFE_NAME_RE.fullmatch(value):
        raise InputError(
            f"{what} {shown} is not a safe name: use letters, digits and ._- "
            "only, not starting with a dot"
        )
    if len(value) > limit:
        raise InputError(f"{what} {shown} is too long: at most {limit} characters")
    return value


_NAME_RE = re.compile(
    r"^(?P<name>.+)\.J(?P<job_id>[^.]+(?:\.[^.]+)*?)(?P<fail>\.FAIL)?"
    r"\.(?P<stamp>\d{8}-\d{6}-\d{6})\.json$"
)


def utc_stamp(when: float | None = None) -> str:
    """UTC time stamp as used in result file names."""
    moment = _dt.datetime.fromtimestamp(
        when if when is not None else _dt.datetime.now().timestamp(), tz=_dt.timezone.utc
    )
    return moment.strftime("%Y%m%d-%H%M%S-%f")


def result_filename(name: str, job_id: str, success: bool, stamp: str) -> str:
    fail = "" if success else ".FAIL"
    return f"{name}.J{job_id}{fail}.{stamp}.json"


def result_paths(outdir: Path, name: str, job_id: str, stamp: str) -> list[Path]:
    """The only files an instance given ``stamp`` may write (FAIL last). The supervisor
    reads these, never the newest file of that name and job id, which may be another
    run's."""
    return [Path(outdir) / result_filename(name, job_id, ok, stamp) for ok in (True, False)]


def parse_filename(filename: str) -> dict[str, Any] | None:
    """Split a result file name into name, job_id, failed and stamp (None if foreign)."""
    m = _NAME_RE.match(Path(filename).name)
    if not m:
        return None
    return {
        "name": m["name"],
        "job_id": m["job_id"],
        "failed": bool(m["fail"]),
        "stamp": m["stamp"],
    }
