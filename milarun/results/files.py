"""Result files on disk: written atomically, never over another; loaded bounded, checked
and upgraded to this version of the format (results.upgrade)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from milarun.errors import ResultError, WriteError
from milarun.results.jsonfile import read_json
from milarun.results.names import MAX_NAME, result_filename
from milarun.results.schema import FORMAT_VERSION, is_number
from milarun.results.upgrade import upgrade


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
    if isinstance(obj, dict):  # a tuple key is what a reader keeps beside the fields
        return {k: _clean(v) for k, v in obj.items() if type(k) is not tuple}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def json_text(data: dict[str, Any]) -> str:
    """``data`` as the JSON write_atomic writes (strict: no NaN)."""
    return json.dumps(_clean(data), indent=2, default=_json_default)


def write_atomic(path: Path, data: dict[str, Any], replace: bool = False) -> Path:
    """Write JSON to ``path`` atomically; never replaces an existing file unless asked
    (a file that is updated in place: the run manifest). See write_text_atomic."""
    return write_text_atomic(path, json_text(data), replace)


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
    problem = _text_problem(data) or _version_problem(data.get("format_version"))
    if problem:
        raise ResultError(f"{path}: {problem}")
    _trim_text(data)
    return upgrade(data)


def _version_problem(version: Any) -> str | None:
    if version is None or (type(version) is int and 1 <= version <= FORMAT_VERSION):
        return None
    if type(version) is int and version > FORMAT_VERSION:
        return (
            f"'format_version' {version} is newer than this milarun reads ({FORMAT_VERSION}): "
            "read it with a newer milarun"
        )
    shown = repr(version[:40]) if isinstance(version, str) else str(version)[:40]
    return f"'format_version' {shown} is not a version number"


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
