"""A result's ``timings`` entries: what a rate log (type "rate") and a timer (type
"timer") measured."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from milarun.results.parts import is_mapping, number
from milarun.results.records.base import FileRecord, write_record

DEFAULT_SLICE = 0.5  # seconds: a record that names no valid slice width


@dataclass(frozen=True)
class RateRecord(FileRecord):
    """What a finished ratelog.RateLog measured. Read from a file, a total that is not a
    finite number reads as None, and a record whose rates are not all numbers reads as no
    record (results.result_problem refuses it)."""

    start: float | None  # wall clock at the first block
    duration: float | None  # from the first block's start to the last block's end
    in_block: float | None  # time inside blocks (device syncs included)
    count: float | None
    max_count: int | None
    blocks: int | None
    syncs: int | None
    slice: float
    last_slice: float | None  # length of the partial last slice, None when there is none
    rates: tuple[float, ...]
    warmup_blocks: int = 0  # first blocks counted but not sliced (lazy init, autotuning)
    warmup_time: float = 0.0  # their in-block time
    slice_ends: tuple[float, ...] = ()  # wall clock at which each slice closed

    @property
    def overhead(self) -> float:
        """Time between blocks (data loading outside them, the harness's own work)."""
        return max(0.0, (self.duration or 0.0) - (self.in_block or 0.0))

    def to_dict(self) -> dict[str, Any]:
        written = write_record(self)
        totals = {key: written.pop(key) for key in ("start", "duration", "in_block")}
        return {"type": "rate", **totals, "overhead": self.overhead, **written}

    @classmethod
    def from_dict(cls, data: Any) -> RateRecord | None:
        if not is_mapping(data) or data.get("type") != "rate":
            return None
        rates = data.get("rates") or []
        if not isinstance(rates, list) or not all(number(r) is not None for r in rates):
            return None
        width = number(data.get("slice", DEFAULT_SLICE))
        width = width if width is not None and width > 0 else DEFAULT_SLICE
        read = super().from_dict({**data, "rates": rates, "slice": width})
        return read if read is None or rates else replace(read, last_slice=None)


@dataclass(frozen=True)
class TimerRecord(FileRecord):
    """What an experiment.Timer measured."""

    start: float | None
    duration: float | None
    entries: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"type": "timer", **write_record(self)}
