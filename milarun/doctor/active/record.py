"""The record of an active check (`doctor --active ... --json FILE`; ``doctor-active.json`` in
a `jobs --doctor` run folder; one per node under `slurm doctor`'s folder).

    {"kind": "milarun-doctor-active", "format": 1, "level": "quick|full|passive", "node": "cn12",
     "hostname": "cn12.cluster", "started": "2026-11-26T05:40:00Z", "seconds": 41.2,
     "devices": "0,1", "milarun_version": "...", "verdict": "PASS|WARN|FAIL", "exit_code": 0,
     "checks": [{"name", "status", "detail", "fix"}],
     "measurements": {"cuda:0": {"gemm_bf16": {"unit": "TFLOP/s", "samples": [...]}, ...},
                      "cpu:1": {"cpu_gemm": {..., "others": 0.03}}},  (others: CPU slices)
     "fingerprints": {"cuda:0": {"fingerprint", "training", "gemm_chain", "stack"}}}

The measurements keep every sample, so records of several nodes can be compared with the
same statistics as one node's devices (milarun.doctor.fleet). A record read back is
untrusted: bounded in size, every field checked, one InputError naming the file and field.
"""

from __future__ import annotations

import datetime as _dt
import math
import socket
from pathlib import Path
from typing import Any

from milarun import errors, results
from milarun.doctor.active import judge
from milarun.doctor.check import FAIL, PASS, STATUSES, WARN, Check
from milarun.machine import slurmenv, sysinfo
from milarun.results import jsonfile

KIND = "milarun-doctor-active"
FORMAT = 1
FILENAME = f"{results.DOCTOR_RECORD}.json"
MAX_BYTES = 16 * 2**20
MAX_SAMPLES = 10_000


def measurements(probed: list[judge.Probed]) -> dict[str, dict[str, Any]]:
    """Per device label, per measurement: its unit and samples (node pairs as gpuI-J)."""
    found: dict[str, dict[str, Any]] = {}
    for p in probed:
        for phase, data in ((p.data or {}).get("phases") or {}).items():
            items = [(phase, data)]
            if phase == "host_link":
                items = [(way, data.get(way) or {}) for way in ("h2d", "d2h")]
            if phase == "p2p":
                for pair, pdata in (data.get("pairs") or {}).items():
                    found.setdefault(f"gpu{pair}", {})["p2p"] = _kept(pdata)
                continue
            for name, d in items:
                if isinstance(d, dict) and d.get("samples"):
                    found.setdefault(p.label, {})[name] = _kept(d)
    return found


def units(probed: list[judge.Probed]) -> dict[str, dict[str, Any]]:
    """Per probe: what it measured and where it ran."""
    return {
        p.label: {
            "kind": p.kind,
            "name": p.name or ((p.data or {}).get("device") or {}).get("name"),
            "placement": p.placement,
            "cpus": ((p.data or {}).get("isolation") or {}).get("cpus"),
            "seconds": round(p.seconds, 3),
            "returncode": p.returncode,
            **({"others": round(p.others, 3)} if p.others is not None else {}),  # GPUs
        }
        for p in probed
    }


def _kept(d: dict[str, Any]) -> dict[str, Any]:
    kept = {"unit": d.get("unit"), "samples": [float(x) for x in d.get("samples") or []]}
    if isinstance(d.get("others"), int | float):  # CPU slices: others' share of its CPUs
        kept["others"] = float(d["others"])
    return kept


def build(
    level: str,
    devices: str,
    checks: list[Check],
    probed: list[judge.Probed],
    started: float,
    seconds: float,
) -> dict[str, Any]:
    verdict = (
        FAIL
        if any(c.status == FAIL for c in checks)
        else (WARN if any(c.status == WARN for c in checks) else PASS)
    )
    return {
        "kind": KIND,
        "format": FORMAT,
        "level": level,
        "node": slurmenv.node_name(),
        "hostname": socket.gethostname(),
        "started": _dt.datetime.fromtimestamp(started, _dt.UTC).isoformat().replace("+00:00", "Z"),
        "seconds": round(seconds, 3),
        "devices": devices,
        "milarun_version": sysinfo.milarun_version(),
        "verdict": verdict,
        "exit_code": 1 if verdict == FAIL else 0,
        "checks": [
            {"name": c.name, "status": c.status, "detail": c.detail, "fix": c.fix} for c in checks
        ],
        "units": units(probed),
        "measurements": measurements(probed),
        "fingerprints": fingerprints(probed),
    }


def fingerprints(probed: list[judge.Probed]) -> dict[str, dict[str, Any]]:
    """Per device label, its silent-data-corruption fingerprint (doctor.active.fingerprint)."""
    found = {}
    for p in probed:
        phase = p.phase("fingerprint")
        if isinstance(phase, dict) and isinstance(phase.get("fingerprint"), str):
            keys = ("fingerprint", "training", "gemm_chain", "stack")
            found[p.label] = {k: phase.get(k) for k in keys}
    return found


def write(path: Path, record: dict[str, Any]) -> Path:
    """Atomically; never over an existing file (a record is never lost)."""
    if path.exists():
        raise errors.UsageError(f"--json {path}: file exists; choose another name")
    return results.write_atomic(path, record)


def _bad(path: Path, field: str, why: str) -> errors.InputError:
    return errors.InputError(f"{path}: field {field!r} {why}: not a doctor --active record")


def read(path: Path) -> dict[str, Any]:
    """A record, checked field by field."""
    data = jsonfile.read_json(path, limit=MAX_BYTES)
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise _bad(path, "kind", f"is not {KIND!r}")
    if data.get("format") != FORMAT:
        raise _bad(path, "format", f"is {data.get('format')!r}, this milarun reads {FORMAT}")
    for key in ("level", "node", "verdict"):
        if not isinstance(data.get(key), str):
            raise _bad(path, key, "is missing or not text")
    if data["verdict"] not in STATUSES:
        raise _bad(path, "verdict", f"is {data['verdict'][:20]!r}")
    checks = data.get("checks")
    if not isinstance(checks, list) or not all(
        isinstance(c, dict)
        and c.get("status") in STATUSES
        and isinstance(c.get("name"), str)
        and isinstance(c.get("detail"), str)
        for c in checks
    ):
        raise _bad(path, "checks", "is not a list of {name, status, detail, fix}")
    found = data.get("measurements")
    if not isinstance(found, dict):
        raise _bad(path, "measurements", "is not an object")
    for label, metrics in found.items():
        if not isinstance(metrics, dict):
            raise _bad(path, f"measurements.{label}", "is not an object")
        for name, m in metrics.items():
            samples = m.get("samples") if isinstance(m, dict) else None
            if (
                not isinstance(samples, list)
                or len(samples) > MAX_SAMPLES
                or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                    for x in samples
                )
            ):
                raise _bad(path, f"measurements.{label}.{name}.samples", "is not a list of numbers")
    return data


def checks_of(data: dict[str, Any]) -> list[Check]:
    return [Check(c["name"], c["status"], c["detail"], c.get("fix")) for c in data["checks"]]
