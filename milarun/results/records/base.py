"""The one way a nested record of a result is written and read: a frozen dataclass whose
fields are the record's keys, in file order. ``to_dict`` writes them; ``from_dict`` takes
whatever a file holds (results.result_problem already refused what no reader survives): an
unknown key is ignored, a missing one takes the field's default, and a value of the wrong
type reads as absent (the default, else None), each field by the reader its type names.
A field with neither a default nor None among its types is the record: where it reads as
absent, the whole record does (None).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, fields, is_dataclass
from functools import cache, partial
from typing import Any, ClassVar, TypeVar, cast

from milarun.results.parts import is_mapping, text

R = TypeVar("R", bound="FileRecord")
T = TypeVar("T")

# Metadata of a field: the key it is written under when not its name (a Python keyword);
# omitted from the file when None (a key that older writers never wrote); a nested record,
# or an object of them by name (an entry that is no such record is left out).
KEY = "key"
OMIT_NONE = "omit_none"
RECORD = "record"
RECORDS = "records"  # an object of nested records by name


def _finite(value: Any) -> Any:
    kind = type(value)  # a bool is no number; an int stays an int, as written
    return value if (kind is float or kind is int) and math.isfinite(value) else None


def _integer(value: Any) -> Any:
    return value if type(value) is int else None


def _boolean(value: Any) -> Any:
    return value if isinstance(value, bool) else None


def _mapping(value: Any) -> Any:
    return value if is_mapping(value) else None


def _items(value: Any) -> Any:
    return tuple(value) if isinstance(value, list | tuple) else None


def _numbers(value: Any) -> Any:
    return tuple(v for v in value if _finite(v) is not None) if isinstance(value, list) else None


def _as_written(value: Any) -> Any:
    return value


# Each field type a record may declare (its annotation, as written) -> how it is read.
READERS: dict[str, Callable[[Any], Any]] = {
    "float": _finite,
    "float | None": _finite,
    "int": _integer,
    "int | None": _integer,
    "str": text,
    "str | None": text,
    "bool | None": _boolean,
    "Mapping[str, Any] | None": _mapping,
    "tuple[str, ...]": _items,
    "tuple[Any, ...] | None": _items,
    "tuple[int, ...] | None": _items,
    "tuple[float, ...]": _numbers,
    "tuple[float, ...] | None": _numbers,
    "Any": _as_written,
}


def _optional(spec: Field[Any]) -> bool:
    return spec.default is None or str(spec.type).endswith("| None") or spec.type == "Any"


def _default(spec: Field[Any]) -> Any:
    if spec.default is not MISSING:
        return spec.default
    if spec.default_factory is not MISSING:
        return spec.default_factory()
    return None if _optional(spec) else MISSING


def file_key(spec: Field[Any]) -> str:
    """The key a field is written under."""
    return spec.metadata.get(KEY, spec.name)


@cache
def _readers(cls: type) -> tuple[tuple[str, str, Callable[[Any], Any], Field[Any]], ...]:
    found = []
    for spec in fields(cls):
        nested, by_name = spec.metadata.get(RECORD), spec.metadata.get(RECORDS)
        read: Callable[[Any], Any] | None
        if nested is not None:
            read = partial(read_record, nested)
        elif by_name is not None:
            read = partial(_read_records, by_name)
        else:
            read = READERS.get(str(spec.type))
        if read is None:
            raise TypeError(f"{cls.__name__}.{spec.name}: no reader for type {spec.type}")
        found.append((spec.name, file_key(spec), read, spec))
    return tuple(found)


def _read_records(kind: type, data: Any) -> dict[str, Any] | None:
    if not is_mapping(data):
        return None
    return {k: found for k, v in data.items() if (found := read_record(kind, v)) is not None}


def written(value: Any) -> Any:
    """A field's value as JSON holds it: a record by its ``to_dict``, a tuple as a list."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if is_dataclass(value):  # machine's records (SlurmBlock) have none: written here
        return write_record(value)
    if isinstance(value, tuple):
        return [written(v) for v in value]
    if isinstance(value, Mapping):
        return {k: written(v) for k, v in value.items()}
    return value


def write_record(record: Any) -> dict[str, Any]:
    """A record dataclass's file object (a nested record written by its own ``to_dict``)."""
    out = {}
    for spec in fields(record):
        value = getattr(record, spec.name)
        if value is None and spec.metadata.get(OMIT_NONE):
            continue
        out[file_key(spec)] = written(value)
    return out


def read_record(cls: type[T], data: Any) -> T | None:
    """The record of dataclass ``cls`` a file holds, None where it holds none (see the
    module's doc): machine's records (GpuIdentity, SlurmBlock) are read here too."""
    if not is_mapping(data):
        return None
    values = {}
    for name, key, read, spec in _readers(cast(type, cls)):
        value = read(data[key]) if key in data else None
        if value is None:
            value = _default(spec)
            if value is MISSING:
                return None
        values[name] = value
    return cls(**values)


class FileRecord:
    """A nested record of a result (subclasses are frozen dataclasses)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return write_record(self)

    @classmethod
    def from_dict(cls: type[R], data: Any) -> R | None:
        """The record a file holds, None where it holds none (see the module's doc)."""
        return read_record(cls, data)


def record_types(cls: type) -> dict[str, type]:
    """The nested record type of each file key of ``cls`` that holds one."""
    return {file_key(s): s.metadata[RECORD] for s in fields(cls) if RECORD in s.metadata}
