"""What a result says it ran: the call, why it failed, the data it read, the isolation it
really had (each a nested record; records.base reads and writes them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from milarun.results.records.base import OMIT_NONE, FileRecord


@dataclass(frozen=True)
class Call(FileRecord):
    """``call``: the test function, its argv (as written: a hand-edited file's may hold
    no strings), and the arguments its parser made of them (None when the test never
    parsed them, e.g. it crashed first)."""

    function: str | None
    argv: tuple[Any, ...] | None
    arguments: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Failure(FileRecord):
    """``failure``: why a run failed."""

    kind: str | None  # one of results.FAILURE_KINDS
    message: str | None


@dataclass(frozen=True)
class Dataset(FileRecord):
    """``dataset`` (measure.experiment's use_dataset): the data a test read."""

    name: str | None = None
    size: float | None = None
    synthetic: bool | None = None


@dataclass(frozen=True)
class Isolation(FileRecord):
    """``isolation`` (measure.confinement): the cgroups, the CPUs of the affinity mask, the
    memory limit in force, torch's threads, the group asked for and whether the reads
    bypass the page cache; the harness's record of an instance that wrote none holds what
    it asked (``requested`` and the ``groups``)."""

    cgroups: Mapping[str, Any] | None = None
    cpus: tuple[int, ...] | None = None
    memory_limit: float | None = None
    torch_threads: int | None = None
    requested: str | None = None
    nocache: bool | None = None
    groups: Any = field(default=None, metadata={OMIT_NONE: True})
