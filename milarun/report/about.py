"""What the runs were, for a report's header and its System block: when they ran, on which
hosts and devices, of which suite; and each distinct system record in words (no ``None``,
lists and records as text). Every renderer (text, JSON, HTML) shows these values."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from milarun.results import jsonfile, parts, read


@dataclass(frozen=True)
class About:
    """When, where and on what the runs of a report ran (empty for a summary file)."""

    started: float | None = None  # epoch s: the first run's start (its end less its program)
    finished: float | None = None  # epoch s: the last run's end
    hosts: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()  # as the report names them (node/device across nodes)
    # the GPU models of the hosts of the runs on GPUs, e.g. "NVIDIA H200, 141 GiB"
    gpus: tuple[str, ...] = ()
    suites: tuple[str, ...] = ()


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key that puts cuda:2 before cuda:10 (and node2 before node10): the digit runs
    compare as numbers."""
    parts = re.split(r"(\d+)", text)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def _number(value: Any) -> float | None:
    """A finite number of a record, else None (a result file may hold anything)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def about(results: Iterable[read.ResultView], many_nodes: bool) -> About:
    """The header of a report made from result files."""
    starts: list[float] = []
    ends: list[float] = []
    hosts: set[str] = set()
    devices: set[str] = set()
    suites: set[str] = set()
    gpus: set[str] = set()
    models = parts.PerRecord(lambda system: {name for name, _ in _gpu_models(system.get("gpus"))})
    for view in results:
        end = _number(view.finished_at)
        if end is not None:
            ends.append(end)
            starts.append(end - (view.program_time or 0.0))
        hosts.add(view.node)
        devices.update(d for d in view.device_label(many_nodes).split(",") if d)
        if view.suite is not None:
            suites.add(view.suite)
        if not view.device.startswith("cpu"):
            gpus |= models(view.system)
    return About(
        min(starts) if starts else None,
        max(ends) if ends else None,
        tuple(sorted(hosts, key=natural_key)),
        tuple(sorted(devices, key=natural_key)),
        tuple(sorted(gpus)),
        tuple(sorted(suites)),
    )


def _gpu_models(gpus: Any) -> list[tuple[str, int]]:
    """(model with its memory, how many) per GPU model of a system record's ``gpus``
    (dicts with name and memory_mb, or, in older records, names)."""
    found: Counter[str] = Counter()
    for gpu in gpus if isinstance(gpus, list) else []:
        if isinstance(gpu, Mapping):
            name = str(gpu.get("name") or "GPU")
            memory = _number(gpu.get("memory_mb"))
            found[f"{name}, {memory / 1024:.0f} GiB" if memory else name] += 1
        elif gpu is not None:
            found[str(gpu)] += 1
    return sorted(found.items())


def _cpu(cpu: Any) -> str | None:
    if not isinstance(cpu, Mapping):
        return _text(cpu)
    parts = [str(cpu["model"])] if cpu.get("model") else []
    if isinstance(cpu.get("count"), int):
        physical = cpu.get("physical")
        cores = f" ({physical} physical cores)" if isinstance(physical, int) else ""
        parts.append(f"{cpu['count']} logical CPUs{cores}")
    return ", ".join(parts) or None


def _cudnn(value: Any) -> str | None:
    """torch's cuDNN version number in the usual form: 90100 -> 9.1.0, 8902 -> 8.9.2."""
    if not isinstance(value, int) or value <= 0:
        return _text(value)
    major, rest = divmod(value, 10000 if value >= 10000 else 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _text(value: Any) -> str | None:
    """Any other value as text: None and empty values dropped, lists comma-separated."""
    if value is None or value == "" or value == [] or value == {}:
        return None
    if isinstance(value, list):
        return ", ".join(t for t in (_text(v) for v in value) if t) or None
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {t}" for k, v in value.items() if (t := _text(v))) or None
    return str(value)


# record key -> (label, how its value reads); keys not here keep their name, after these
FIELDS: dict[str, tuple[str, Any]] = {
    "os": ("OS", _text),
    "cpu": ("CPU", _cpu),
    "ram_gb": ("RAM", lambda v: f"{v:.1f} GiB" if _number(v) else _text(v)),
    "gpus": ("GPUs", lambda v: "; ".join(f"{n} x {m}" for m, n in _gpu_models(v)) or "none found"),
    "driver": ("GPU driver", _text),
    "python": ("Python", _text),
    "milarun": ("milarun", _text),
    "torch": ("PyTorch", _text),
    "cuda": ("CUDA", _text),
    "cudnn": ("cuDNN", _cudnn),
    "hip": ("ROCm (HIP)", _text),
    "gpu_backend": ("GPU backend", _text),  # which library listed the GPUs (nvml, amdsmi)
    "note": ("note", _text),
}


def system_text(record: Mapping[str, Any], hosts: list[str], label: str = "host") -> dict[str, str]:
    """A system record in words, label -> text, with the hosts that share it."""
    out = {label: ", ".join(hosts)}
    for key, (name, reads) in FIELDS.items():
        if key in record and (text := reads(record[key])) is not None:
            out[name] = text
    for key, value in record.items():
        if key not in FIELDS and key != "hostname" and (text := _text(value)) is not None:
            out[key] = text
    return out


def _without_host(record: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """A system record but for its host name, and its identity (records alike but for the
    host name are one system)."""
    kept = {k: v for k, v in record.items() if k != "hostname"}
    return jsonfile.canonical(kept), kept


def systems(results: Iterable[read.ResultView]) -> list[dict[str, str]]:
    """Each distinct system record in words; records alike but for the host name are one,
    naming its hosts (a fleet of identical nodes is one block). Every block has the same
    first label: "host", or "hosts" when one names several."""
    groups: dict[bytes, tuple[Mapping[str, Any], dict[str, None]]] = {}
    keyed = parts.PerRecord(_without_host)
    for view in results:
        record = view.system
        key, rest = keyed(record)
        host = str(record.get("hostname") or view.node)
        groups.setdefault(key, (rest, {}))[1][host] = None  # the hosts in order, once each
    label = "host" if all(len(h) == 1 for _, h in groups.values()) else "hosts"
    return [
        system_text(record, sorted(hosts, key=natural_key), label)
        for record, hosts in groups.values()
    ]
