"""What a run manifest holds (``RunManifest``), and the machine record kept beside it
(``MachineRecord``: the ``.sysinfo`` file, its system record typed).

``to_dict`` writes the manifest's JSON as the supervisor always has (the same keys in the
same order: a manifest written before reads and writes back the same bytes); ``from_dict``
takes what a file holds after ``results.manifest`` checked the fields it cannot do without
(status, reason, started_at, planned, ended): any other field a hand damaged reads as absent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milarun import errors
from milarun.results.jsonfile import read_json

KIND = "milarun-run"
# A time past this (the year 9999) is no time: a hand-damaged file (1e300, NaN).
MAX_TIME = 253402300799.0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _texts(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


@dataclass
class EndedInstance:
    """An entry of ``ended``: one instance's end, its result file (None: it wrote none) and,
    where its disk was full, why it was not written and where it was written at last."""

    test: str
    job_id: str | None
    success: bool
    result: str | None
    unwritten: str | None = None  # omitted from the file when None (so are the next ones)
    written_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        entry = {
            "test": self.test,
            "job_id": self.job_id,
            "success": self.success,
            "result": self.result,
        }
        extra = {"unwritten": self.unwritten, "written_to": self.written_to}
        return {**entry, **{k: v for k, v in extra.items() if v is not None}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EndedInstance:
        job_id, unwritten = data.get("job_id"), data.get("unwritten")
        return cls(
            test=str(data["test"]),
            job_id=job_id if isinstance(job_id, str) else None,
            success=data.get("success") is True,
            result=_text(data.get("result")),
            unwritten=str(unwritten) if unwritten else None,
            written_to=_text(data.get("written_to")),
        )


@dataclass(frozen=True)
class RunSpan:
    """When a run's supervisor started and finished it (None: not finished, or no time), and
    the result files it recorded as its instances ended."""

    started_at: float
    finished_at: float | None
    results: frozenset[str]


@dataclass
class RunManifest:
    """One ``jobs`` run: what it was asked to do (profile, devices, planned tests and
    instances, the tender's challenge) and how far it got (status, each instance's end)."""

    profile: str | None
    status: str  # running, complete, interrupted, failed
    reason: str | None
    started_at: float
    finished_at: float | None
    pid: int | None
    host: str | None
    devices: list[str]
    repeat: int | None
    planned: list[str]
    instances: list[tuple[str, str]]  # every (test, job id) it will record; [] before them
    ended: list[EndedInstance] = field(default_factory=list)
    challenge: str | None = None  # omitted from the file when None

    def to_dict(self) -> dict[str, Any]:
        data = {
            "kind": KIND,
            "profile": self.profile,
            "status": self.status,
            "reason": self.reason,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "pid": self.pid,
            "host": self.host,
            "devices": list(self.devices),
            "repeat": self.repeat,
            "planned": list(self.planned),
            "instances": [list(pair) for pair in self.instances],
            "ended": [e.to_dict() for e in self.ended],
        }
        return data if self.challenge is None else {**data, "challenge": self.challenge}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunManifest:
        """A manifest whose status, reason, started_at, planned and ended were checked."""
        started, finished = data["started_at"], data.get("finished_at")
        pairs = data.get("instances")
        return cls(
            profile=_text(data.get("profile")),
            status=str(data["status"]),
            reason=_text(data.get("reason")),
            started_at=started,  # int or float, as written (checked)
            finished_at=finished if _number(finished) is not None else None,
            pid=_whole(data.get("pid")),
            host=_text(data.get("host")),
            devices=_texts(data.get("devices")),
            repeat=_whole(data.get("repeat")),
            planned=list(data["planned"]),
            instances=[
                (p[0], p[1])
                for p in (pairs if isinstance(pairs, list) else [])
                if isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
            ],
            ended=[EndedInstance.from_dict(e) for e in data["ended"]],
            challenge=_text(data.get("challenge")),
        )

    @property
    def span(self) -> RunSpan:
        end = self.finished_at
        return RunSpan(
            float(self.started_at),
            end if end is not None and 0 <= end <= MAX_TIME else None,
            frozenset(e.result for e in self.ended if e.result is not None),
        )


@dataclass(frozen=True)
class SystemGpu:
    """One GPU of a system record (machine.sysinfo)."""

    index: int | None
    name: str | None
    memory_mb: float | None
    pci_device_id: str | None = None


@dataclass(frozen=True)
class SystemRecord:
    """A machine's system record (machine.sysinfo.system_record), the fields read back."""

    hostname: str | None
    gpus: tuple[SystemGpu, ...]
    driver: str | None = None
    gpu_backend: str | None = None
    milarun: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> SystemRecord:
        data = data if isinstance(data, Mapping) else {}
        gpus = data.get("gpus")
        return cls(
            hostname=_text(data.get("hostname")),
            gpus=tuple(
                SystemGpu(
                    _whole(g.get("index")),
                    _text(g.get("name")),
                    _number(g.get("memory_mb")),
                    _text(g.get("pci_device_id")),
                )
                for g in (gpus if isinstance(gpus, list) else [])
                if isinstance(g, Mapping)
            ),
            driver=_text(data.get("driver")),
            gpu_backend=_text(data.get("gpu_backend")),
            milarun=_text(data.get("milarun")),
        )


@dataclass(frozen=True)
class MachineRecord:
    """The ``.sysinfo`` a run keeps beside its manifest: the system record, typed, and the
    file as read (``data``: for the device checks that read its every field)."""

    system: SystemRecord
    data: Mapping[str, Any]

    @classmethod
    def read(cls, kept: Path) -> MachineRecord | None:
        """The record of the file ``kept``, None where there is none or it is no object."""
        try:
            data = read_json(kept) if kept.is_file() else None
        except errors.InputError:
            return None
        if not isinstance(data, dict):
            return None
        return cls(SystemRecord.from_dict(data.get("system")), data)
