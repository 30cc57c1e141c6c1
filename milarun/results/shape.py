"""The shape of a result: its keys and the type each field a reader computes with must have,
both read off the one builder (records.ResultRecord), and ``result_problem``, which names the
first field of a loaded result that is not of its type."""

from __future__ import annotations

import math
from dataclasses import Field, fields
from typing import Any

from milarun.results.jsonfile import CONTAINERS, MAX_DEPTH, too_deep
from milarun.results.records.result import END_KEYS as END_KEYS
from milarun.results.records.result import LAUNCH_KEYS as LAUNCH_KEYS
from milarun.results.records.result import OWN_KEYS as OWN_KEYS
from milarun.results.records.result import RECORD_KEYS as RECORD_KEYS
from milarun.results.records.result import RESULT_KEYS as RESULT_KEYS
from milarun.results.records.result import TYPED, ResultRecord
from milarun.results.schema import is_number


def _objects(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())


def _opt(check: Any) -> Any:
    return lambda v: v is None or check(v)


def _of(kind: type) -> Any:
    """null or an instance of ``kind``."""
    return _opt(lambda v: isinstance(v, kind))


# The type of every result field a reader computes with (ResultRecord's fields marked
# TYPED), read off its annotation: a hand-edited or foreign file with another type is skipped
# with the field's name, never a traceback.
def _field_type(spec: Field[Any]) -> tuple[str, Any]:
    annotation, named = str(spec.type), spec.metadata[TYPED]
    if spec.name == "job_id":  # a legacy file's job id may be a number
        return "a string", _opt(lambda v: isinstance(v, (str, int)) and not isinstance(v, bool))
    if annotation.startswith("Mapping[str, "):  # timings, diagnostics: records by name
        return "an object of objects", _opt(_objects)
    if annotation.startswith(("list[", "tuple[")):
        return "a list", _of(list)
    if annotation.startswith("str"):
        return named if isinstance(named, str) else "a string", _of(str)
    return "an object", _of(dict)  # a nested record, or the machine's own objects


_FIELD_TYPES: dict[str, tuple[str, Any]] = {
    spec.name: _field_type(spec) for spec in fields(ResultRecord) if spec.metadata.get(TYPED)
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
