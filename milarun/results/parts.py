"""The nested records of a result, read: one frozen type per record, each parsed once by a
``from_dict`` that mirrors its writer's ``to_dict`` and takes whatever a file holds (a field
of the wrong type reads as absent, never as an error: ``results.result_problem`` already
refused what a reader could not survive).

The writers live where the values are measured (measure.diagnostics, measure.startup,
measure.efficiency, measure.energy, measure.contention, measure.confinement, machine.gpuids,
machine.sysinfo, results.records); the readers are here, so that the report, the tender, the
history, the doctor and Slurm read a result through ``results.read.ResultView`` and never
open its dicts by hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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


@dataclass(frozen=True)
class FailureRead:
    """``failure`` (records.Failure): why a run failed."""

    kind: str | None
    message: str | None

    @classmethod
    def from_dict(cls, data: Any) -> FailureRead | None:
        if not isinstance(data, Mapping):
            return None
        return cls(text(data.get("kind")), text(data.get("message")))


@dataclass(frozen=True)
class CallRead:
    """``call`` (records.Call): the test function and its argv."""

    function: Any
    argv: tuple[Any, ...] | None  # as written (a hand-edited file's may hold no strings)
    arguments: dict[str, Any] | None = None  # the parsed arguments, as the test recorded them

    @classmethod
    def from_dict(cls, data: Any) -> CallRead | None:
        if not isinstance(data, dict):
            return None
        argv = data.get("argv")
        arguments = data.get("arguments")
        return cls(
            data.get("function"),
            tuple(argv) if isinstance(argv, list) else None,
            arguments if isinstance(arguments, dict) else None,
        )


@dataclass(frozen=True)
class DatasetRead:
    """``dataset`` (measure.experiment): the data a test read."""

    name: Any
    size: Any
    synthetic: Any
    record: Mapping[str, Any]  # the whole record, as a summary keeps it

    @classmethod
    def from_dict(cls, data: Any) -> DatasetRead | None:
        if not isinstance(data, dict):
            return None
        return cls(data.get("name"), data.get("size"), data.get("synthetic"), data)


@dataclass(frozen=True)
class MathSettings:
    """``efficiency.settings``: the TF32 switches a test ran with."""

    tf32_capable: Any  # true/false as written (a reader tests ``is True``)
    tf32_matmul: Any
    tf32_cudnn: Any

    @classmethod
    def from_dict(cls, data: Any) -> MathSettings | None:
        if not isinstance(data, dict):
            return None
        return cls(data.get("tf32_capable"), data.get("tf32_matmul"), data.get("tf32_cudnn"))


@dataclass(frozen=True)
class EfficiencyRead:
    """``efficiency`` (measure.efficiency.Efficiency): FLOPs, the device and its peak."""

    flops_per_example: Any
    achieved_flops: Any
    percent_of_peak: Any
    device_name: Any
    precision: Any
    settings: MathSettings | None
    flops_per_step: Any = None
    flops_by_precision: Mapping[str, Any] | None = None  # FLOPs of one step, per precision
    peak_flops: Any = None

    @classmethod
    def from_dict(cls, data: Any) -> EfficiencyRead | None:
        if not isinstance(data, Mapping):
            return None
        by_precision = data.get("flops_by_precision")
        return cls(
            data.get("flops_per_example"),
            data.get("achieved_flops"),
            data.get("percent_of_peak"),
            data.get("device_name"),
            data.get("precision"),
            MathSettings.from_dict(data.get("settings")),
            data.get("flops_per_step"),
            by_precision if isinstance(by_precision, Mapping) else None,
            data.get("peak_flops"),
        )


@dataclass(frozen=True)
class IsolationRead:
    """``isolation`` (measure.confinement): the cgroups and CPUs an instance really had."""

    cgroups: Mapping[str, Any] | None
    cpus: tuple[int, ...] | None
    memory_limit: Any
    torch_threads: Any
    nocache: Any

    @classmethod
    def from_dict(cls, data: Any) -> IsolationRead | None:
        if not isinstance(data, Mapping):
            return None
        groups, cpus = data.get("cgroups"), data.get("cpus")
        return cls(
            groups if isinstance(groups, Mapping) else None,
            tuple(cpus) if isinstance(cpus, list) else None,
            data.get("memory_limit"),
            data.get("torch_threads"),
            data.get("nocache"),
        )


@dataclass(frozen=True)
class ContentionRead:
    """``diagnostics.<timer>.contention`` (measure.contention.Contention)."""

    others: float
    cpus: int | None
    load: Any

    @classmethod
    def from_dict(cls, data: Any) -> ContentionRead | None:
        others = number(data.get("others")) if isinstance(data, dict) else None
        if others is None:
            return None
        cpus = data.get("cpus")
        return cls(others, cpus if isinstance(cpus, int) else None, data.get("load"))


@dataclass(frozen=True)
class DiagnosticsRead:
    """``diagnostics.<timer>`` (measure.diagnostics.Diagnostics): the steady window's
    quality. Numbers are kept as written; readers average the finite ones."""

    slices: Any
    cv: Any
    drift: Any
    warmup: Any
    flags: tuple[str, ...]
    throttle: Mapping[str, Any] | None  # results.throttle.read reads it
    contention: Any  # ContentionRead.from_dict reads it
    record: Mapping[str, Any]  # the whole record, as the history database keeps it

    @classmethod
    def from_dict(cls, data: Any) -> DiagnosticsRead:
        data = as_map(data)
        flags, throttle = data.get("flags"), data.get("throttle")
        return cls(
            data.get("slices"),
            data.get("cv"),
            data.get("drift"),
            data.get("warmup"),
            tuple(flags) if isinstance(flags, list) else (),
            throttle if isinstance(throttle, Mapping) else None,
            data.get("contention"),
            data,
        )


@dataclass(frozen=True)
class StartupRead:
    """``startup`` (measure.startup.Startup): where the time before the first slice went."""

    to_first_slice: Any
    imports: Any
    setup: Any
    first_step: Any

    @classmethod
    def from_dict(cls, data: Any) -> StartupRead:
        data = as_map(data)
        return cls(
            data.get("to_first_slice"),
            data.get("import"),
            data.get("setup"),
            data.get("first_step"),
        )


@dataclass(frozen=True)
class EnergyRead:
    """``energy`` (measure.energy.Energy): the steady window's energy."""

    joules: Any
    watts: Any
    joules_per_example: Any
    examples_per_joule: Any
    method: Any
    record: Mapping[str, Any]  # the whole record, as the history database keeps it
    seconds: Any = None  # the steady window's wall-clock length
    examples: Any = None  # examples trained in it (all ranks)

    @classmethod
    def from_dict(cls, data: Any) -> EnergyRead | None:
        if not isinstance(data, dict):
            return None
        return cls(
            data.get("joules"),
            data.get("watts"),
            data.get("joules_per_example"),
            data.get("examples_per_joule"),
            data.get("method"),
            data,
            data.get("seconds"),
            data.get("examples"),
        )


@dataclass(frozen=True)
class RateRecordRead:
    """A ``timings`` entry of type "rate" (records.RateRecord): its totals, its slices and
    when they closed. A total that is not a finite number reads as None; a record whose
    rates are not all numbers reads as no record (results.result_problem refuses it)."""

    start: float | None
    duration: float | None
    in_block: float | None
    count: float | None
    blocks: float | None
    slice: float
    last_slice: float | None
    rates: tuple[float, ...]
    warmup_time: float
    slice_ends: tuple[float, ...]

    @classmethod
    def from_dict(cls, data: Any) -> RateRecordRead | None:
        if not isinstance(data, Mapping) or data.get("type") != "rate":
            return None
        rates, ends = data.get("rates") or [], data.get("slice_ends") or []
        if not isinstance(rates, list) or not all(number(r) is not None for r in rates):
            return None
        width = number(data.get("slice", 0.5))
        return cls(
            number(data.get("start")),
            number(data.get("duration")),
            number(data.get("in_block")),
            number(data.get("count")),
            number(data.get("blocks")),
            width if width is not None and width > 0 else 0.5,
            number(data.get("last_slice")) if rates else None,
            tuple(float(r) for r in rates),
            number(data.get("warmup_time", 0.0)) or 0.0,
            tuple(float(e) for e in ends if number(e) is not None)
            if isinstance(ends, list)
            else (),
        )


@dataclass(frozen=True)
class GpuIdentityRead:
    """An entry of ``gpu_identity`` (machine.gpuids.GpuIdentity)."""

    id: Any
    uuid: Any
    pci_bus_id: Any

    @classmethod
    def from_dict(cls, data: Any) -> GpuIdentityRead | None:
        if not isinstance(data, Mapping):
            return None
        return cls(data.get("id"), data.get("uuid"), data.get("pci_bus_id"))


@dataclass(frozen=True)
class SlurmRead:
    """``slurm`` (machine.slurmenv.slurm_block): the Slurm job and node."""

    job_id: Any
    node: Any

    @classmethod
    def from_dict(cls, data: Any) -> SlurmRead | None:
        if not isinstance(data, Mapping):
            return None
        return cls(data.get("job_id"), data.get("node"))


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
