"""The result format: its keys, its version, its failure kinds and the type every field a
reader computes with must have (``result_problem``). DESIGN section 5 is its contract."""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from milarun.results.jsonfile import CONTAINERS, MAX_DEPTH, too_deep

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
    "server",  # the inference server a test started misbehaved (measure.loadgen)
    "unavailable",  # the engine a test needs is not installed (vLLM's own environment)
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
    "node_monitor",
    "node_energy",
    "gpu_identity",
    "node",
    "slurm",
    "ranks",
    "format_version",
)
# The version of the file format a result is written in (results.upgrade reads every older
# one): 2 added this key; a file without it is version 1.
FORMAT_VERSION = 2
# How `milarun jobs` launched the instance (its --extra): null in a plain `milarun run`.
LAUNCH_KEYS = ("suite", "repeat", "prepare", "world_size")
# How the process ended: a signal and the log only the harness sees, and when.
END_KEYS = ("signal", "log", "finished_at")
# Every key of every record, in file order. ``written_by`` is not one of them: only a record
# the harness wrote carries it, its presence is the marker.
RECORD_KEYS = RESULT_KEYS + END_KEYS + LAUNCH_KEYS
WRITTEN_BY = "written_by"
# ``written_by`` of the supervisor's record of an instance that wrote none: it holds the call
# the supervisor launched (a rerun repeats it)
HARNESS_WRITER = "harness"
# The keys a launch's --extra may not set (it may set "job", the launch keys and others).
OWN_KEYS = frozenset(RECORD_KEYS + (WRITTEN_BY,)) - {"job", *LAUNCH_KEYS}


# The record of `jobs --doctor` in a run folder (doctor-active[.<stamp>].json): not a result,
# so result readers pass over it rather than list it as skipped.
DOCTOR_RECORD = "doctor-active"

# A rate above this (examples/s) is not a measurement: beyond any machine, and its square
# (a variance) would overflow a float. Such a run counts as failed; a baseline is refused.
MAX_RATE = 1e15

# Weights above this are not weights but a way to overflow the score (1e308 -> nan).
MAX_WEIGHT = 1e6


def is_number(value: Any) -> bool:
    kind = type(value)  # a parsed float or int first: reports test millions
    return kind is float or kind is int or (isinstance(value, (int, float)) and kind is not bool)


def is_finite(value: Any) -> TypeGuard[float]:
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
    "call": ("an object", _of(dict)),
    "dataroot": ("a path", _of(str)),
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
    "node_monitor": ("an object", _of(dict)),
    "node_energy": ("an object", _of(dict)),
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
_BULKY_FIELDS = frozenset({"timings", "gpu_monitor", "cpu_monitor", "node_monitor", "metrics"})
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
    call = data.get("call") or {}
    argv = call.get("argv")
    if argv is not None and not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        return "'call.argv' is not a list of strings"
    if not isinstance(call.get("function"), (str, type(None))):
        return "'call.function' is not a string"
    failure = data.get("failure") or {}
    if not isinstance(failure.get("kind"), (str, type(None))) or not isinstance(
        failure.get("message"), (str, type(None))
    ):
        return "'failure' kind/message are not strings"
    for name in ("gpu_monitor", "cpu_monitor", "node_monitor"):
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
