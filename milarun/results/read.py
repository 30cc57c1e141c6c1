"""The one reader of results: a typed view over a loaded result (``results.load_result``
checked its shape), with its rate series, its per-rank series, its node and its device.

The summary, the node comparison, the energy record and the HTML charts all read a result
through this view, so a rule such as "a distributed run's rate is the mean of its ranks"
lives in one place.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from milarun.results import steady
from milarun.results.inference import InferenceRun
from milarun.results.parts import as_map, is_mapping, monitor_peak, ran_on, text
from milarun.results.records import (
    Call,
    Dataset,
    Diagnostics,
    Efficiency,
    Energy,
    Failure,
    GpuIdentity,
    Isolation,
    NodeEnergy,
    SlurmBlock,
    Startup,
    read_record,
)
from milarun.results.schema import WRITTEN_BY, is_finite
from milarun.results.series import RateSeries, measured_rate, rank_timers, slice_width

T = TypeVar("T")
# What a result without a start-up or diagnostics record reads: every value unknown.
NO_STARTUP = Startup()
NO_DIAGNOSTICS = Diagnostics()


# not frozen: a frozen __init__ costs more, and a fleet report makes a million views
@dataclass(slots=True)
class ResultView:
    """A result as the reports read it. ``data`` is the whole result, for what has no
    typed reading here (monitors, diagnostics, energy).

    A result a folder's loader sealed (seal: read once, not changed after) keeps what its
    views read (its series, rate and node) for the next view of it: a report reads each
    several times, and re-reading them was most of a fleet report's time."""

    data: Mapping[str, Any]
    _memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResultView:
        held: Mapping[Any, Any] = data  # a sealed result's own keys are not strings
        memo = held.get(MEMO)
        if not isinstance(memo, dict):
            memo = {}
            if SEALED in held and isinstance(held, dict):
                held[MEMO] = memo  # the memo, not the view: no cycle through the result
        return cls(data, memo)

    def _remember(self, key: Any, compute: Callable[[], T]) -> T:
        try:
            return self._memo[key]
        except KeyError:
            found = self._memo[key] = compute()
            return found

    def _record(self, key: str, kind: type[T]) -> T | None:
        """The nested record under ``key``, read once (records are frozen: shared)."""
        return self._remember(key, lambda: read_record(kind, self.data.get(key)))

    @property
    def name(self) -> str:
        return str(self.data.get("name"))

    @property
    def device(self) -> str:
        return str(self.data.get("device"))

    @property
    def timings(self) -> Mapping[str, Any]:
        timings = self.data.get("timings")
        return timings if is_mapping(timings) else {}

    # -- the result's own fields, typed (results.records reads its nested records) --------
    @property
    def named(self) -> bool:
        """Whether it holds a test name (a foreign or hand-edited file may not)."""
        return isinstance(self.data.get("name"), str)

    @property
    def job_id(self) -> str:
        return str(self.data.get("job_id"))

    @property
    def recorded_job_id(self) -> str | None:
        """The job id as written (a number as text), None where it has none."""
        job_id = self.data.get("job_id")
        return None if job_id is None else str(job_id)

    @property
    def success(self) -> bool:
        return self.data.get("success") is True

    @property
    def error(self) -> str | None:
        return text(self.data.get("error"))

    @property
    def hostname(self) -> str | None:
        return text(self.data.get("hostname"))

    @property
    def milarun_version(self) -> str | None:
        return text(self.data.get("milarun_version"))

    @property
    def finished_at(self) -> Any:
        return self.data.get("finished_at")

    @property
    def suite(self) -> str | None:
        """The suite `milarun jobs` ran it in (None outside one)."""
        return text(self.data.get("suite")) or None

    @property
    def repeat(self) -> Any:
        return self.data.get("repeat")

    @property
    def rerun_of(self) -> Any:
        return self.data.get("rerun_of")

    @property
    def job(self) -> Any:
        """The profile's job it ran as (its --extra), as written."""
        return self.data.get("job")

    @property
    def dataroot(self) -> str | None:
        return text(self.data.get("dataroot"))

    @property
    def environ(self) -> Any:
        """The recorded environment, as written (a rerun checks each entry)."""
        return self.data.get("environ")

    @property
    def world_size(self) -> int | None:
        size = self.data.get("world_size")
        return size if type(size) is int else None

    @property
    def ranks(self) -> list[Any]:
        """A distributed run's ranks ({rank, node, host, device} each), as written."""
        ranks = self.data.get("ranks")
        return ranks if isinstance(ranks, list) else []

    @property
    def written_by(self) -> str | None:
        """Who wrote it where its test could not (the harness), else None."""
        return text(self.data.get(WRITTEN_BY)) or None

    @property
    def synthetic_data(self) -> bool:
        return self.data.get("synthetic_data") is True

    @property
    def devices(self) -> list[Any]:
        devices = self.data.get("devices")
        return devices if isinstance(devices, list) else []

    @property
    def metrics(self) -> Mapping[str, Any]:
        return as_map(self.data.get("metrics"))

    @property
    def system(self) -> Mapping[str, Any]:
        """The machine's inventory (machine.sysinfo.system_record); one object shared by a
        folder's results that agree (results.bulk), so that PerRecord reads it once."""
        return as_map(self.data.get("system"))

    @property
    def isolation_record(self) -> Mapping[str, Any] | None:
        """The isolation record as written (shared as ``system`` is), for PerRecord."""
        found = self.data.get("isolation")
        return found if is_mapping(found) else None

    @property
    def failure(self) -> Failure | None:
        return self._record("failure", Failure)

    @property
    def call(self) -> Call | None:
        return self._record("call", Call)

    @property
    def dataset(self) -> Dataset | None:
        return self._record("dataset", Dataset)

    @property
    def efficiency(self) -> Efficiency | None:
        return self._record("efficiency", Efficiency)

    @property
    def isolation(self) -> Isolation | None:
        return self._record("isolation", Isolation)

    @property
    def inference(self) -> InferenceRun | None:
        """An inference test's engine, comparison key and latency figures; None otherwise."""
        settings = as_map(self.data.get("efficiency")).get("settings")
        return InferenceRun.from_result(settings, self.metrics)

    @property
    def startup(self) -> Startup:
        """Where the time before the first slice went (all unknown where not recorded)."""
        return self._record("startup", Startup) or NO_STARTUP

    @property
    def energy(self) -> Energy | None:
        return self._record("energy", Energy)

    @property
    def node_energy(self) -> NodeEnergy | None:
        """The node's energy over the steady window (measure.nodepower; None: none)."""
        return self._record("node_energy", NodeEnergy)

    @property
    def gpu_monitor(self) -> Mapping[str, Any]:
        """The GPU monitor's record ({interval, samples, note}; empty where there is none)."""
        return as_map(self.data.get("gpu_monitor"))

    @property
    def slurm(self) -> SlurmBlock | None:
        return self._record("slurm", SlurmBlock)

    @property
    def gpu_identity(self) -> list[GpuIdentity]:
        found = self.data.get("gpu_identity")
        read = [read_record(GpuIdentity, g) for g in found] if isinstance(found, list) else []
        return [g for g in read if g is not None]

    def diagnostics(self, timer: str = "train") -> Diagnostics:
        """The steady window's quality record of ``timer`` (NO_DIAGNOSTICS where none)."""
        return (
            self._remember(
                ("diagnostics", timer),
                lambda: read_record(Diagnostics, as_map(self.data.get("diagnostics")).get(timer)),
            )
            or NO_DIAGNOSTICS
        )

    def series(self, timer: str = "train") -> RateSeries | None:
        """The single-process rate series of ``timer`` (None when there is none)."""
        return self._remember(
            ("series", timer), lambda: RateSeries.from_dict(self.timings.get(timer))
        )

    def rank_series(self, timer: str = "train") -> list[RateSeries | None] | None:
        """Each rank's series of a distributed result, in rank order; None for a
        single-process result."""

        def compute() -> list[RateSeries | None] | None:
            ranks = rank_timers(self.timings, timer)
            return [RateSeries.from_dict(r) for r in ranks] or None

        return self._remember(("rank_series", timer), compute)

    def all_series(self, timer: str = "train") -> list[RateSeries]:
        """Every rate series of ``timer``: one per rank, else the single one (charts)."""
        found = self.rank_series(timer) or [self.series(timer)]
        return [s for s in found if s is not None]

    def steady_window(self, timer: str = "train") -> tuple[float, ...]:
        """The finite slices of the single-process series' steady window (empty: none),
        read from the record (no copy of its whole series: a fleet report reads 100,000)."""
        record = self.timings.get(timer)
        if not is_mapping(record):
            return ()
        window = steady.window(record.get("rates") or (), slice_width(record))
        # rates are numbers or null (results.result_problem); isfinite drops NaN and inf
        return tuple(float(r) for r in window if r is not None and math.isfinite(r))

    def rank_rates(self, timer: str = "train") -> list[float | None] | None:
        """Each rank's steady rate of a distributed result; None for a single process."""
        ranks = self.rank_series(timer)
        return None if ranks is None else [s.steady_rate if s else None for s in ranks]

    def rate(self, timer: str = "train") -> float | None:
        """Steady examples/s of a successful result (None if it has none).

        A distributed result is the mean of its ranks' rates, as the legacy suite counted
        scaling.k (every rank one sample of the same test); the total over the ranks is
        this mean times the number of ranks (the summary's ``throughput``).
        """
        return self._remember(("rate", timer), lambda: self._rate(timer))

    def _rate(self, timer: str) -> float | None:
        if self.data.get("success") is not True or self.has_nan_metric:
            return None
        ranks = self.rank_rates(timer)
        if ranks is not None:
            measured = [r for r in ranks if r is not None]
            return math.fsum(measured) / len(measured) if len(measured) == len(ranks) else None
        # read from the record, no copy of its series: every result's rate is read once
        record = self.timings.get(timer)
        if not is_mapping(record):
            return None
        return measured_rate(record.get("rates") or (), slice_width(record))

    @property
    def has_nan_metric(self) -> bool:
        metrics = self.data.get("metrics")
        if not is_mapping(metrics):
            return False
        return any(
            v is None or (isinstance(v, float) and not math.isfinite(v)) for v in metrics.values()
        )

    @property
    def failure_kind(self) -> str:
        """The failure kind of a result that does not count as a successful run."""
        failure = self.data.get("failure")
        if is_mapping(failure) and failure.get("kind"):
            return str(failure["kind"])
        if self.data.get("success") is True:
            return "nan" if self.has_nan_metric else "no-rate"
        return "unknown"

    @property
    def program_time(self) -> float | None:
        program = self.timings.get("program")
        if not is_mapping(program):
            return None
        value = program.get("duration", program.get("time"))
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def node(self) -> str:
        """The node it ran on: ``node``, else (older results) the Slurm block's node, else
        the host name."""
        return self._remember("node", self._node)

    def _node(self) -> str:
        return ran_on(self.data) or "?"

    @property
    def rank_nodes(self) -> int | None:
        """How many distinct nodes a distributed result's ``ranks`` ran on (None: none)."""
        ranks = self.data.get("ranks")
        if not isinstance(ranks, list):
            return None
        return len({str(r.get("node")) for r in ranks if is_mapping(r)}) or None

    @property
    def device_key(self) -> str | None:
        """The device of a single-device run; None for multi-device (scaling) runs."""
        devices = self.data.get("devices")
        if isinstance(devices, list) and len(devices) > 1:
            return None
        device = self.data.get("device")
        if device is None or "," in str(device):
            return None
        return str(device)

    @property
    def distributed(self) -> bool:
        """Several devices, per-rank series or ranks: not one device's measurement."""
        return (
            self.device_key is None or self.rank_series() is not None or self.rank_nodes is not None
        )

    def device_label(self, many_nodes: bool) -> str:
        """Its device as reports name it: ``<node>/<device>`` when the results span nodes
        (two nodes' cpu:0 are two devices), else the device alone."""
        return f"{self.node}/{self.device}" if many_nodes else self.device

    @property
    def peak_memory(self) -> float | None:
        """Largest memory use the monitors saw, in MiB (GPU memory when there is one): the
        value seal() kept, else read from the samples."""
        held: Mapping[Any, Any] = self.data
        if PEAK_MEMORY in held:
            kept = held[PEAK_MEMORY]
            return float(kept) if is_finite(kept) else None
        return monitor_peak(self.data)


# Keys no JSON file can hold (a file's keys are strings), so that no result file can plant
# them: the peak seal() kept, the mark of a sealed result, and what its views read.
PEAK_MEMORY = ("monitors", "peak_memory")
SEALED = ("sealed",)
MEMO = ("memo",)


def views(found: Iterable[ResultView | Mapping[str, Any]]) -> list[ResultView]:
    """Results as views: a folder's (results.folder) are views already; a result just
    written (a dict: run, tests) is read here."""
    return [r if isinstance(r, ResultView) else ResultView.from_dict(r) for r in found]


def spans_nodes(loaded: Iterable[ResultView]) -> bool:
    """True when the results come from more than one node (as soon as a second shows)."""
    nodes = (view.node for view in loaded)
    first = next(nodes, None)
    return any(node != first for node in nodes)
