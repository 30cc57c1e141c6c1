"""The one reader of results: a typed view over a loaded result (``results.load_result``
checked its shape), with its rate series, its per-rank series, its node and its device.

The summary, the node comparison, the energy record and the HTML charts all read a result
through this view, so a rule such as "a distributed run's rate is the mean of its ranks"
lives in one place.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeGuard, TypeVar

from milarun import results
from milarun.results import steady
from milarun.results import throttle as gpu_throttle

T = TypeVar("T")


def is_mapping(value: Any) -> TypeGuard[Mapping[Any, Any]]:
    """is_mapping(value), a parsed result's plain dict first: the ABC's check is
    several times the cost, and a fleet report makes millions."""
    return type(value) is dict or isinstance(value, Mapping)


def rank_timers(timings: Mapping[str, T], timer: str = "train") -> list[T]:
    """A distributed run's ``<timer>_<rank>`` entries in rank order (empty for a
    single-process run); the entries may be dicts read from a file or records in memory."""
    prefix = f"{timer}_"
    ranks = sorted(
        (int(key[len(prefix) :]), value)
        for key, value in timings.items()
        if key.startswith(prefix) and key[len(prefix) :].isdigit()
    )
    return [value for _, value in ranks]


def slice_width(record: Mapping[str, Any]) -> float:
    """A rate record's slice duration (0.5 s where it holds none that is usable)."""
    width = record.get("slice", 0.5)
    return float(width) if results.is_finite(width) and width > 0 else 0.5


def measured_rate(rates: Sequence[float], slice_duration: float) -> float | None:
    """The steady rate of a series; None when too short, or when NaN, zero, negative or
    absurd: such a rate is no measurement and the run counts as failed."""
    rate = steady.rate(rates, slice_duration)
    return rate if rate is not None and 0 < rate <= results.MAX_RATE else None


@dataclass(frozen=True)
class RateSeries:
    """A ``timings`` entry of type "rate": examples/s per slice of in-block time."""

    rates: tuple[float, ...]
    slice: float = 0.5
    slice_ends: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, record: Any) -> RateSeries | None:
        """The series of a timings entry; None for anything that is not one."""
        if not is_mapping(record):
            return None
        return cls(
            tuple(record.get("rates") or ()),
            slice_width(record),
            tuple(record.get("slice_ends") or ()),
        )

    @property
    def steady_slices(self) -> list[float]:
        """The slices of the steady window (results.steady)."""
        return steady.window(self.rates, self.slice)

    @property
    def steady_rate(self) -> float | None:
        """The steady rate (measured_rate)."""
        return measured_rate(self.rates, self.slice)


# not frozen: its __init__ was twice the cost, and a fleet report makes a million views
@dataclass(slots=True)
class ResultView:
    """A result as the reports read it. ``data`` is the whole result, for what has no
    typed reading here (monitors, diagnostics, energy).

    A result a folder's loader sealed (seal: read once, not changed after) keeps what its
    views read (its series, rate and node) for the next view of it: a report reads each
    several times, and 100,000 results made that most of its time."""

    data: Mapping[str, Any]
    _memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResultView:
        held: Mapping[Any, Any] = data  # a sealed result's own keys are not strings
        memo = held.get(_MEMO)
        if not isinstance(memo, dict):
            memo = {}
            if _SEALED in held and isinstance(held, dict):
                held[_MEMO] = memo  # the memo, not the view: no cycle through the result
        return cls(data, memo)

    def _remember(self, key: Any, compute: Callable[[], T]) -> T:
        try:
            return self._memo[key]
        except KeyError:
            found = self._memo[key] = compute()
            return found

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
        slurm = self.data.get("slurm")
        for value in (
            self.data.get("node"),
            slurm.get("node") if is_mapping(slurm) else None,
            self.data.get("hostname"),
        ):
            if isinstance(value, str) and value:
                return value
        return "?"

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
            return float(kept) if results.is_finite(kept) else None
        return monitor_peak(self.data)


# Keys no JSON file can hold (a file's keys are strings), so that no result file can plant
# them: the peak seal() kept, the mark of a sealed result, and what its views read.
PEAK_MEMORY = ("monitors", "peak_memory")
_SEALED = ("sealed",)
_MEMO = ("memo",)


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


def drop_samples(data: dict[Any, Any]) -> float | None:
    """Drop a result's monitor samples (most of its size: 100,000 results were 8.3 GiB read
    whole) and return what reports use of them, the peak memory (and, for a throttle
    record made before it kept them, the GPUs' median SM clocks: added to it)."""
    peak = monitor_peak(data)
    gpu_throttle.add_sm_clocks(
        data, lambda: RateSeries.from_dict((data.get("timings") or {}).get("train"))
    )
    for key in ("gpu_monitor", "cpu_monitor"):
        monitor = data.get(key)
        if isinstance(monitor, dict) and monitor.get("samples"):
            data[key] = {**monitor, "samples": []}
    return peak


def seal(data: dict[Any, Any], peak: float | None = None, *, digested: bool = False) -> None:
    """A result read from a file and checked, made ready for reports that read it many
    times: its samples dropped (drop_samples), their peak kept (``digested``: ``peak``, the
    one a folder's digest kept of them); the result is not changed after, so that its
    view may remember what it read."""
    found = drop_samples(data)
    data[PEAK_MEMORY] = peak if digested else found
    data[_SEALED] = True
    # Its rate and node, read now: where bulk.read_folders reads in worker processes, this is
    # done there, in parallel (the series are dropped, as the result holds them already).
    view = ResultView.from_dict(data)
    rate, node = view.rate(), view.node
    view._memo.clear()
    view._memo.update({("rate", "train"): rate, "node": node})


def views(loaded: Iterable[Mapping[str, Any]]) -> list[ResultView]:
    return [ResultView.from_dict(r) for r in loaded]


def spans_nodes(loaded: Iterable[Mapping[str, Any]]) -> bool:
    """True when the results come from more than one node (as soon as a second shows)."""
    nodes = (ResultView.from_dict(r).node for r in loaded)
    first = next(nodes, None)
    return any(node != first for node in nodes)


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
