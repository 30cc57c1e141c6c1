"""The values of a result, read: JSON's plain values typed (a value of the wrong type reads
as absent, never as an error: ``results.result_problem`` already refused what a reader could
not survive), the monitors' peak memory and the GPU names of a system record. The nested
records are results.records' (each reads itself); results.read.ResultView reads the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeGuard, TypeVar

EMPTY: Mapping[str, Any] = {}
T = TypeVar("T")


def is_mapping(value: Any) -> TypeGuard[Mapping[Any, Any]]:
    """is_mapping(value), a parsed result's plain dict first: the ABC's check is
    several times the cost, and a fleet report makes millions."""
    return type(value) is dict or isinstance(value, Mapping)


def as_map(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if type(value) is dict or isinstance(value, Mapping) else EMPTY


def number(value: Any) -> float | None:
    """A finite number (not a bool) as a float, else None."""
    kind = type(value)
    if (kind is float or kind is int) and math.isfinite(value):
        return float(value)
    return None


def text(value: Any) -> str | None:
    """A string, else None."""
    return value if isinstance(value, str) else None


def ran_on(data: Mapping[str, Any]) -> str | None:
    """Where a result ran: its ``node``, else (format 1) the Slurm block's node, else the
    host name; None where it names none."""
    for value in (data.get("node"), as_map(data.get("slurm")).get("node"), data.get("hostname")):
        if isinstance(value, str) and value:
            return value
    return None


def gpu_names(system: Mapping[str, Any]) -> set[str]:
    """The GPU names a system record (machine.sysinfo) lists; tests' records list names."""
    gpus = system.get("gpus")
    found = (
        [g.get("name") if isinstance(g, dict) else g for g in gpus]
        if isinstance(gpus, list)
        else []
    )
    return {name for name in found if isinstance(name, str)}


def _peak(best: float, value: Any) -> float:
    # type() rather than isinstance: a bool is no number, and this runs per sample
    if type(value) in (int, float) and best < value < math.inf:  # NaN compares False
        return float(value)
    return best


def monitor_peak(data: Mapping[str, Any]) -> float | None:
    """The peak memory (MiB) in a result's monitor samples: the GPU monitor's largest used
    memory, else the CPU monitor's largest RSS. Samples are typed here, where they are read
    (results.result_problem checks only that they are lists); plain loops over JSON's dicts
    and lists, as this reads every sample of every result of a report."""
    best = -math.inf
    gpu = data.get("gpu_monitor")
    for sample in gpu.get("samples") or () if type(gpu) is dict else ():
        gpus = sample.get("gpus") if type(sample) is dict else None
        for one in gpus.values() if type(gpus) is dict else ():
            memory = one.get("memory") if type(one) is dict else None
            if type(memory) is list and memory:
                best = _peak(best, memory[0])
    if best == -math.inf:
        cpu = data.get("cpu_monitor")
        for sample in cpu.get("samples") or () if type(cpu) is dict else ():
            if type(sample) is dict:
                best = _peak(best, sample.get("rss_mb"))
    return None if best == -math.inf else best


class PerRecord(Generic[T]):
    """``read`` of a record, computed once per record object: a folder's loader shares one
    object per distinct system and isolation record (results.bulk), so a report's section
    reads each of 100,000 results' records a few times only. Each record is held here, so
    that its id is its own while it is looked up."""

    def __init__(self, read: Callable[[Any], T]) -> None:
        self._read = read
        self._found: dict[int, tuple[T, Any]] = {}

    def __call__(self, record: Any) -> T:
        found = self._found.get(id(record))
        if found is None:
            found = self._found[id(record)] = (self._read(record), record)
        return found[0]
