"""Reading a JSON file a user hands us (results, manifests, weights, baselines, profiles):
bounded in size and depth, a regular file only, and every way it can be unusable one
error naming the file."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from milarun.errors import InputError

# Files a reader accepts: regular files (a FIFO or device would block or never end) of
# at most this size.
MAX_FILE_BYTES = 64 * 2**20
MAX_DEPTH = 64  # a result nests ~6 levels; code that walks a value recursively must not fail


CONTAINERS = frozenset({dict, list})


def canonical(value: Any) -> bytes:
    """A value's identity as bytes: its JSON, keys sorted, what is no JSON as its str
    (orjson, fast enough to key every result of a fleet run; json for what orjson refuses,
    an integer past 64 bits)."""
    try:
        return orjson.dumps(
            value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str
        )
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, sort_keys=True, default=str).encode()


def read_json(
    path: Path,
    error: type[InputError] = InputError,
    limit: int = MAX_FILE_BYTES,
    check_depth: bool = True,
) -> Any:
    """The JSON in ``path``, read with a bound; ``error`` with the reason when unusable:
    not a regular file, larger than ``limit``, not UTF-8, not JSON, nested too deep
    (``check_depth=False``: only beyond what the parser allows, e.g. for results, whose
    readers check the depth of the fields they pass on: see result_problem)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # checked before fdopen, which refuses a folder
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{path}: a folder, not a JSON file")
        raise error(f"{path}: not a regular file")
    with os.fdopen(fd, "rb", buffering=0) as f:
        if info.st_size > limit:
            raise error(
                f"{path}: larger than {limit // 2**20} MiB ({info.st_size / 2**20:.0f} MiB)"
            )
        try:  # the size it has now, then what it may have grown by, up to the limit
            raw = f.read(info.st_size + 1)
            if len(raw) > info.st_size:
                raw += f.read(limit + 1 - len(raw)) or b""
        except OSError as err:
            raise error(f"{path}: cannot read ({err.strerror})") from None
    if len(raw) > limit:
        raise error(f"{path}: larger than {limit // 2**20} MiB")
    deep = f"{path}: JSON nested deeper than {MAX_DEPTH} levels"
    try:
        data = orjson.loads(raw)  # faster than json on rate series; reports read 10k files
    except orjson.JSONDecodeError as first:
        if "depth" in str(first):
            raise error(deep) from None
        try:  # the stdlib also accepts NaN/Infinity, which hand-edited files may hold
            data = json.loads(raw.decode("utf-8"), parse_int=_parse_int)
        except UnicodeDecodeError:
            raise error(f"{path}: not UTF-8 text") from None
        except RecursionError:
            raise error(deep) from None
        except json.JSONDecodeError as err:
            raise error(f"{path}: not valid JSON (line {err.lineno}, column {err.colno})") from None
    if check_depth and too_deep(data, MAX_DEPTH):
        raise error(deep)
    return data


def _parse_int(text: str) -> int | float:
    """An integer of the stdlib parser, as orjson reads one: beyond 64 bits it is a float
    (inf past the float range), never a 4300-digit int that no reader can compute with."""
    return int(text) if len(text) <= 19 else float(text)


def levels(data: Any) -> Iterator[list[Any]]:
    """The containers (objects, arrays) of a JSON value, one level at a time from the top,
    without recursion (a value may nest as deep as the parser allows). Parsed JSON holds
    plain dicts and lists: type() tests them at half the cost of isinstance (a report checks
    100,000 results)."""
    containers = [data] if type(data) in CONTAINERS else []
    while containers:
        yield containers
        inner: list[Any] = []
        for item in containers:
            values = item.values() if type(item) is dict else item
            inner += [v for v in values if type(v) in CONTAINERS]
        containers = inner


def too_deep(data: Any, limit: int) -> bool:
    return any(depth > limit for depth, _ in enumerate(levels(data), 1))
