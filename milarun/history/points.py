"""The history's points as read from the database: each result an Instance, grouped into
the Points of a series (one test on one machine, node or GPU), each with its steady slices
pooled as a Sample for Welch's test (milarun.history.trends judges them). The names a
database holds (tests, machines, nodes, GPUs), for a name that matches none."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from milarun.errors import UsageError, unknown_name
from milarun.history.models import INFERENCE_FIGURES, Gpu, Machine, Node, Result, Run
from milarun.report import stats

INSUFFICIENT = "Insufficient data"


@dataclass(frozen=True)
class Filters:
    test: str | None = None
    machine: str | None = None
    node: str | None = None
    gpu: str | None = None
    since: float | None = None  # points before this are shown no more (still a baseline)


@dataclass(frozen=True)
class Sample:
    """Steady slices as Welch's test reads them: their count, sum and sum of squares, so
    that pooling points is adding and "every sibling but this one" is subtracting."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0

    @classmethod
    def of(cls, values: np.ndarray) -> Sample:
        return cls(len(values), float(values.sum()), float(np.square(values).sum()))

    def __add__(self, other: Sample) -> Sample:
        return Sample(self.n + other.n, self.total + other.total, self.squares + other.squares)

    def __sub__(self, other: Sample) -> Sample:
        return Sample(self.n - other.n, self.total - other.total, self.squares - other.squares)

    @property
    def mean(self) -> float:
        return self.total / self.n

    @property
    def std(self) -> float:
        """The population standard deviation (what stats.welch_verdict takes)."""
        return math.sqrt(max(self.squares / self.n - self.mean**2, 0.0))


@dataclass(frozen=True)
class Instance:
    """One result as the trends read it."""

    test: str
    machine: str
    run_id: int
    started_at: float
    repeat: int
    node: str
    device: str
    gpu: str | None
    args_hash: str
    rate: float | None
    sample: Sample | None  # its steady slices (None: failed)
    failure_kind: str | None
    driver: str | None
    flags: Sequence[str] | None
    throttle: Any
    energy: Any = None  # the GPUs' energy record, the node's (its BMC) under "bmc"
    inference: str | None = None  # an inference test's comparison key in words
    latency: Mapping[str, float] = field(default_factory=dict)  # INFERENCE_FIGURES it has

    @property
    def node_examples_per_joule(self) -> float | None:
        """Examples per joule at the node's plug (milarun.measure.nodepower), where measured."""
        node = self.energy.get("bmc") if isinstance(self.energy, dict) else None
        value: Any = node.get("examples_per_joule") if isinstance(node, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value) if math.isfinite(value) and value > 0 else None

    @property
    def unit(self) -> str:
        """The device as a GPU series names it: its UUID, else node/device."""
        return self.gpu or f"{self.node}/{self.device}"


@dataclass
class Point:
    series: str
    test: str
    run_id: int
    repeat: int
    when: float
    args_hash: str
    instances: list[Instance] = field(default_factory=list)
    verdict: str = INSUFFICIENT
    change: float | None = None  # rate / baseline rate - 1
    p_value: float | None = None
    baseline_points: int = 0
    notes: list[str] = field(default_factory=list)

    @cached_property
    def sample(self) -> Sample:
        """Its instances' steady slices, pooled."""
        return sum((i.sample for i in self.instances if i.rate is not None and i.sample), Sample())

    @property
    def rates(self) -> list[float]:
        return [i.rate for i in self.instances if i.rate is not None]

    @property
    def failures(self) -> int:
        return sum(i.rate is None for i in self.instances)

    @property
    def busy(self) -> int:
        """Its measured instances flagged busy: other processes took their CPUs."""
        return sum(i.rate is not None and "busy" in (i.flags or ()) for i in self.instances)

    @property
    def rate(self) -> float | None:
        rates = self.rates
        return math.fsum(rates) / len(rates) if rates else None

    @property
    def node_perf_per_watt(self) -> float | None:
        """The mean node examples/J of its instances that have one (a BMC measured them)."""
        found = [v for i in self.instances if (v := i.node_examples_per_joule) is not None]
        return math.fsum(found) / len(found) if found else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """95%: the bootstrap over instances (several), else over the one's slices."""
        rates = self.rates
        if len(rates) >= 2:
            return stats.mean_interval(rates, resamples=1000)
        sample = self.sample
        if len(rates) == 1 and sample.n >= 2:
            half = 1.96 * sample.std * math.sqrt(1 / (sample.n - 1))  # the sample std / sqrt(n)
            return rates[0] - half, rates[0] + half
        return None

    @property
    def drivers(self) -> set[str]:
        return {i.driver for i in self.instances if i.driver}

    def latency(self, name: str) -> float | None:
        """An inference figure (INFERENCE_FIGURES), the mean of its measured instances'."""
        found = [v for i in self.instances if i.rate is not None and (v := i.latency.get(name))]
        return math.fsum(found) / len(found) if found else None


def _query(filters: Filters):  # noqa: ANN202 (a Select of 15 columns)
    query = (
        select(
            Result.test,
            Machine.name,
            Run.id,
            Run.started_at,
            Result.repeat,
            Node.name,
            Result.device,
            Gpu.uuid,
            Result.args_hash,
            Result.rate,
            Result.steady_n,
            Result.steady_sum,
            Result.steady_squares,
            Result.failure_kind,
            Result.driver,
            Result.flags,
            Result.throttle,
            Result.energy,
            Result.inference,
            *(getattr(Result, name) for name in INFERENCE_FIGURES),
        )
        .join(Run, Result.run_id == Run.id)
        .join(Machine, Run.machine_id == Machine.id)
        .join(Node, Result.node_id == Node.id)
        .outerjoin(Gpu, Result.gpu_id == Gpu.id)
    )
    if filters.test:
        query = query.where(Result.test == filters.test)
    if filters.machine:
        query = query.where(Machine.name == filters.machine)
    if filters.node:
        query = query.where(Node.name == filters.node)
    if filters.gpu:
        query = query.where(Gpu.uuid == filters.gpu)
    return query


def instances(session: Session, filters: Filters, after: float | None = None) -> list[Instance]:
    query = _query(filters)
    if after is not None:
        query = query.where(Run.started_at >= after)
    found = []
    for row in session.execute(query):
        n, total, squares = row[10:13]
        sample = Sample(n, total, squares) if n else None
        figures = dict(zip(INFERENCE_FIGURES, row[19:], strict=True))
        latency = {k: float(v) for k, v in figures.items() if v is not None}
        found.append(Instance(*row[:10], sample, *row[13:19], latency))  # type: ignore[call-arg]
    return found


def _series_key(instance: Instance, by: str) -> str:
    """Its series' name; an inference test's key (engine, version, precision, lengths,
    concurrency) is part of it, as in the report: fp8 and bf16 are never one series."""
    test = f"{instance.test} [{instance.inference}]" if instance.inference else instance.test
    if by == "test":
        return f"{test} @ {instance.machine}"
    if by == "node":
        return f"{test} @ {instance.machine}/{instance.node}"
    return f"{test} @ {instance.unit}"


def build_points(found: Iterable[Instance], by: str) -> dict[str, list[Point]]:
    """series -> its points in time order."""
    points: dict[tuple[str, int, int], Point] = {}
    for inst in found:
        key = _series_key(inst, by)
        point = points.get((key, inst.run_id, inst.repeat))
        if point is None:
            point = Point(key, inst.test, inst.run_id, inst.repeat, inst.started_at, inst.args_hash)
            points[(key, inst.run_id, inst.repeat)] = point
        point.instances.append(inst)
    series: dict[str, list[Point]] = defaultdict(list)
    for point in points.values():
        series[point.series].append(point)
    for found_points in series.values():
        found_points.sort(key=lambda p: (p.when, p.run_id, p.repeat))
    return dict(sorted(series.items()))


NAMED = {"test": Result.test, "machine": Machine.name, "node": Node.name, "gpu": Gpu.uuid}


def names(session: Session, what: str) -> list[str]:
    """Every distinct ``what`` (test, machine, node, gpu) the database holds."""
    column = NAMED[what]
    return sorted(n for n in session.scalars(select(column).distinct()).all() if n is not None)


def check_names(session: Session, filters: Filters) -> None:
    """A UsageError naming the first filter that matches nothing in the database, with the
    closest names it holds (a typo: quick.polynom)."""
    for what in NAMED:
        given = getattr(filters, what)
        if given:
            known = names(session, what)
            if given not in known:
                raise UsageError(unknown_name(what, given, known))
