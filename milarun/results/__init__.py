"""Result files: schema, names, atomic writes and tolerant loading.

A result is one JSON object per test instance. File name:
``<name>.J<job_id>[.FAIL].<UTC %Y%m%d-%H%M%S-%f>.json`` (DESIGN section 5).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from milarun.errors import InputError, ResultError, WriteError
from milarun.results.jsonfile import CONTAINERS

# Reading a user's JSON file, bounded and checked: results/jsonfile.py.
from milarun.results.jsonfile import MAX_DEPTH as MAX_DEPTH
from milarun.results.jsonfile import MAX_FILE_BYTES as MAX_FILE_BYTES
from milarun.results.jsonfile import read_json as read_json
from milarun.results.jsonfile import too_deep as too_deep

# The flags the harness adds to every test's parser (measure.experiment): how long a run
# measures, or its seed; not what it measures.
HARNESS_FLAGS = frozenset({"--min-slices", "--max-count", "--ci-target", "--seed"})

FAILURE_KINDS = (
    "exception",
    "nan",
    "timeout",
    "killed",
    "oom",
    "crash",
    "interrupted",
    "too-short",
    "no-rate",  # a steady rate of 0 (no example counted), or beyond any machine
)

# Keys every result carries (legacy keys first, then the ones milarun added).
RESULT_KEYS = (
    "name",
    "job_id",
    "dataroot",
    "outdir",
    "job",
    "device",
    "devices",
    "call",
    "success",
    "error",
    "hostname",
    "gpu",
    "device_count",
    "environ",
    "metrics",
    "timings",
    "gpu_monitor",
    "cpu_monitor",
    "milarun_version",
    "system",
    "isolation",
    "failure",
    "returncode",
    "synthetic_data",
    "dataset",
    "rerun_of",
    "startup",
    "diagnostics",
    "efficiency",
    "energy",
    "gpu_identity",
    "node",
    "slurm",
    "ranks",
)
# How `milarun jobs` launched the instance (its --extra): null in a plain `milarun run`.
LAUNCH_KEYS = ("suite", "repeat", "prepare", "world_size")
# How the process ended: a signal and the log only the harness sees, and when.
END_KEYS = ("signal", "log", "finished_at")
# Every key of every record, in file order. ``written_by`` is not one of them: only a record
# the harness wrote carries it, its presence is the marker.
RECORD_KEYS = RESULT_KEYS + END_KEYS + LAUNCH_KEYS
WRITTEN_BY = "written_by"
# The keys a launch's --extra may not set (it may set "job", the launch keys and others).
OWN_KEYS = frozenset(RECORD_KEYS + (WRITTEN_BY,)) - {"job", *LAUNCH_KEYS}


# A name that becomes a path component (test name, job id): letters, digits and ._-, not
# starting with a dot, short enough that ``<name>.J<id>.FAIL.<stamp>.json`` (and the
# temporary file written before it) fits the 255 bytes of a file name.
MAX_NAME = 100
# The record of `jobs --doctor` in a run folder (doctor-active[.<stamp>].json): not a result,
# so result readers pass over it rather than list it as skipped.
DOCTOR_RECORD = "doctor-active"
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


# A rate above this (examples/s) is not a measurement: beyond any machine, and its square
# (a variance) would overflow a float. Such a run counts as failed; a baseline is refused.
MAX_RATE = 1e15

# Weights above this are not weights but a way to overflow the score (1e308 -> nan).
MAX_WEIGHT = 1e6


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


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return repr(obj)


def _clean(obj: Any) -> Any:
    """Replace non-finite floats by None so the file stays strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_atomic(path: Path, data: dict[str, Any], replace: bool = False) -> Path:
    """Write JSON to ``path`` atomically; never replaces an existing file unless asked
    (a file that is updated in place: the run manifest). See write_text_atomic."""
    return write_text_atomic(
        path, json.dumps(_clean(data), indent=2, default=_json_default), replace
    )


def write_text_atomic(path: Path, text: str, replace: bool = False) -> Path:
    """Write ``text`` to ``path`` atomically: to a temporary file in the same folder,
    flushed to disk, then hard-linked to its final name (which fails rather than
    overwrite) or, with ``replace``, renamed over it. Any OSError is a one-line WriteError
    and no temporary file survives."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as err:  # a full disk, a read-only folder: one line, no temp file left
        raise WriteError(f"{path}: cannot write ({err.strerror or err})") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return path


def write_result(
    outdir: Path, result: dict[str, Any], stamp: str, path: Path | None = None
) -> Path:
    """Write a result under its DESIGN name in ``outdir`` (or at ``path``)."""
    if path is None:
        outdir = Path(outdir)
        outdir.mkdir(parents=True, exist_ok=True)
        name = result_filename(result["name"], result["job_id"], bool(result["success"]), stamp)
        path = outdir / name
    return write_atomic(path, result)


def load_result(path: Path) -> dict[str, Any]:
    """Load one result file; raises ResultError with the reason if it is not one."""
    # The depth of a whole result is not checked here: walking every rate and monitor
    # sample would double the time of a 10k-file report; result_problem checks the rest.
    return as_result(read_json(path, ResultError, check_depth=False), path)


def as_result(data: Any, path: Path) -> dict[str, Any]:
    """Parsed JSON as a result (its labels checked, its long texts trimmed); raises
    ResultError naming ``path`` when it is not one."""
    if not isinstance(data, dict) or "name" not in data or "success" not in data:
        raise ResultError(f"{path}: not a milarun result (no 'name'/'success' keys)")
    problem = _text_problem(data)
    if problem:
        raise ResultError(f"{path}: {problem}")
    _trim_text(data)
    return data


# Every report prints a result's name and job id, and its labels (device, node) as the rows
# of its tables: each one line of bounded length, so that no file makes a report of 270 MB
# or a message of several lines. (Names milarun writes are safe names, see safe_name; a
# file's are only printed, and wherever one becomes a path it is checked there.)
MAX_LABEL = 255  # a host name's length
# What a report quotes of a failure: the error's tail (the log's last 50 lines, as the
# harness writes it) and the message's head.
MAX_ERROR, MAX_MESSAGE = 64 * 1024, 4096


def _text_problem(data: dict[str, Any]) -> str | None:
    job_id, slurm, devices = data.get("job_id"), data.get("slurm"), data.get("devices")
    texts = [("name", data["name"], MAX_NAME)]
    texts.append(("job_id", str(job_id) if is_number(job_id) else job_id, MAX_NAME))
    texts += [(key, data.get(key), MAX_LABEL) for key in ("device", "node", "hostname")]
    node = slurm.get("node") if isinstance(slurm, dict) else None
    texts.append(("slurm.node", node, MAX_LABEL))
    texts += [("devices", d, MAX_LABEL) for d in (devices if isinstance(devices, list) else ())]
    for key, value, limit in texts:
        if not isinstance(value, str):
            continue  # its type is result_problem's to check
        shown = repr(value[:60]) + (f"... ({len(value)} characters)" if len(value) > 60 else "")
        if len(value) > limit:
            return f"'{key}' {shown} is too long: at most {limit} characters"
        if not value.isprintable():
            return f"'{key}' {shown} holds a line break or control character"
    return None


def _trim_text(data: dict[str, Any]) -> None:
    """Keep the error's tail and the failure message's head: what any report shows. The
    trimmed texts, their notes included, fit the bounds, so trimming again (a digest's
    entry is checked as its file was) changes nothing."""
    error, failure = data.get("error"), data.get("failure")
    if isinstance(error, str) and len(error) > MAX_ERROR:
        kept = MAX_ERROR - 40  # room for the note
        data["error"] = f"[{len(error) - kept} characters cut]\n{error[-kept:]}"
    if isinstance(failure, dict) and isinstance(failure.get("message"), str):
        message = failure["message"]
        if len(message) > MAX_MESSAGE:
            kept = MAX_MESSAGE - 40
            failure["message"] = f"{message[:kept]} [{len(message) - kept} cut]"


def is_number(value: Any) -> bool:
    kind = type(value)  # a parsed float or int first: reports test millions
    return kind is float or kind is int or (isinstance(value, (int, float)) and kind is not bool)


def is_finite(value: Any) -> bool:
    """A number (not a bool) that is neither NaN nor infinite."""
    return is_number(value) and math.isfinite(value)


def _objects(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())


def _opt(check: Any) -> Any:
    return lambda v: v is None or check(v)


def _of(kind: type) -> Any:
    """null or an instance of ``kind``."""
    return _opt(lambda v: isinstance(v, kind))


# The type of every result field a reader computes with: a hand-edited or foreign file
# with another type is skipped with the field's name, never a traceback.
_FIELD_TYPES: dict[str, tuple[str, Any]] = {
    "job_id": ("a string", _opt(lambda v: isinstance(v, (str, int)) and not isinstance(v, bool))),
    "device": ("a string", _of(str)),
    "devices": ("a list", _of(list)),
    "error": ("a string", _of(str)),
    "metrics": ("an object", _of(dict)),
    "timings": ("an object of objects", _opt(_objects)),
    "failure": ("an object", _of(dict)),
    "gpu_monitor": ("an object", _of(dict)),
    "cpu_monitor": ("an object", _of(dict)),
    "isolation": ("an object", _of(dict)),
    "system": ("an object", _of(dict)),
    "dataset": ("an object", _of(dict)),
    "startup": ("an object", _of(dict)),
    "efficiency": ("an object", _of(dict)),
    "energy": ("an object", _of(dict)),
    "gpu_identity": ("a list", _of(list)),
    "node": ("a string", _of(str)),
    "slurm": ("an object", _of(dict)),
    "ranks": ("a list", _of(list)),
    "diagnostics": ("an object of objects", _opt(_objects)),
    "environ": ("an object", _of(dict)),
}


# The types parsed JSON gives a field that its check above accepts, tested by type() first:
# a report checks 100,000 results, and most fields are null or of their plain type.
_PLAIN_TYPES: dict[str, frozenset[type]] = {
    key: frozenset({type(None), *(t for t in (str, int, float, list, dict) if ok(t()))})
    - ({dict} if key in ("timings", "diagnostics") else set())  # what its values are matters
    for key, (_, ok) in _FIELD_TYPES.items()
}
_FIELD_CHECKS = [(key, kind, _PLAIN_TYPES[key], ok) for key, (kind, ok) in _FIELD_TYPES.items()]


# Measurement series: their values are read field by field (typed here or where read),
# never passed on whole, so their depth does not matter and is not walked.
_BULKY_FIELDS = frozenset({"timings", "gpu_monitor", "cpu_monitor", "metrics"})
_RATE_TYPES = {int, float, type(None)}


def result_problem(data: dict[str, Any]) -> str | None:
    """Why a loaded result cannot be used (a field of the wrong type), or None."""
    if not isinstance(data["name"], str) or not data["name"]:
        return "'name' is not a test name"
    if not isinstance(data["success"], bool):
        return "'success' is not true/false"
    for key, kind, plain, ok in _FIELD_CHECKS:
        value = data.get(key)
        if type(value) not in plain and not ok(value):
            return f"'{key}' is not {kind}"
    # One walk (the list is the level the result itself would be), then which field
    nested = [v for k, v in data.items() if type(v) in CONTAINERS and k not in _BULKY_FIELDS]
    if too_deep(nested, MAX_DEPTH):
        for key, value in data.items():
            if key not in _BULKY_FIELDS and too_deep(value, MAX_DEPTH - 1):
                return f"'{key}' is nested deeper than {MAX_DEPTH} levels"
    for timer, record in (data.get("timings") or {}).items():
        for series in ("rates", "slice_ends"):
            values = record.get(series)
            if values is not None and not (
                isinstance(values, list) and set(map(type, values)) <= _RATE_TYPES
            ):
                return f"'timings.{timer}.{series}' is not a list of numbers"
        for key in ("slice", "duration", "time"):
            value = record.get(key)
            if value is not None and not (is_number(value) and math.isfinite(value) and value >= 0):
                return f"'timings.{timer}.{key}' is not a number >= 0"
        if record.get("slice") == 0:
            return f"'timings.{timer}.slice' is 0"
    failure = data.get("failure") or {}
    if not isinstance(failure.get("kind"), (str, type(None))) or not isinstance(
        failure.get("message"), (str, type(None))
    ):
        return "'failure' kind/message are not strings"
    for name in ("gpu_monitor", "cpu_monitor"):
        samples = (data.get(name) or {}).get("samples")
        if samples is not None and not isinstance(samples, list):
            return f"'{name}.samples' is not a list"  # its items are typed where read
    for timer, diag in (data.get("diagnostics") or {}).items():
        flags = diag.get("flags")
        if flags is not None and not (
            isinstance(flags, list) and all(isinstance(f, str) for f in flags)
        ):
            return f"'diagnostics.{timer}.flags' is not a list of strings"
    dataset = data.get("dataset") or {}
    if not _opt(lambda v: is_number(v) and math.isfinite(v))(dataset.get("size")):
        return "'dataset.size' is not a number"
    iso = data.get("isolation") or {}
    if (
        not isinstance(iso.get("cgroups"), (dict, type(None)))
        or not isinstance(iso.get("cpus"), (list, type(None)))
        or not all(isinstance(c, int) for c in iso.get("cpus") or [])
    ):
        return "'isolation' cgroups/cpus are not an object/a list of CPU numbers"
    return None
