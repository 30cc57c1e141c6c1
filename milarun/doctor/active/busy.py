"""Was the machine busy while `doctor --active` measured? Other processes' share of a probe's
CPUs (a CPU slice's per phase, the GPU probes' over their run) and other processes on a GPU
(where the device backend lists them: NVML's compute processes). A figure measured on a busy
machine is shown, never judged: WARN "not verdict-grade: the machine was busy", from the
report's busy threshold (milarun.measure.contention's BUSY_LIMIT), as the report marks a busy
run. No torch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from milarun.doctor.check import INFO, PASS, WARN, Check
from milarun.measure.contention import BUSY_LIMIT, MIN_SPAN

AGAIN = "measure again when nothing else runs on this machine (`top`)"


def cpus_taken(share: float | None) -> str | None:
    """What others took of a probe's CPUs, when it is the report's busy flag, else None."""
    if share is None or share < BUSY_LIMIT:
        return None
    return f"other processes took {share:.0%} of its CPUs"


def gpu_others(samples: Sequence[dict[str, Any]], pid: int | None) -> int | None:
    """The most processes on a GPU at once besides its probe, from the backend's listings
    (None: it lists none here). Where a listing holds the probe's pid, the others are the
    rest; where none does (the probe not yet on the GPU, or a container whose pids are not
    the host's), one listed process is taken for the probe's."""
    lists = [s["processes"] for s in samples if isinstance(s.get("processes"), list)]
    if not lists:
        return None
    if pid is not None and any(pid in listed for listed in lists):
        return max(len(set(listed) - {pid}) for listed in lists)
    return max(max(len(set(listed)) - 1, 0) for listed in lists)


def gpu_took(share: float | None, others: int | None) -> list[str]:
    """Why a GPU's figures are not verdict-grade (none: they are)."""
    reasons = [took] if (took := cpus_taken(share)) else []
    if others:
        reasons.append(f"{others} other process{'es' if others > 1 else ''} ran on the GPU")
    return reasons


def not_verdict_grade(check: Check, reasons: list[str]) -> Check:
    """A measured line (any verdict but INFO's) with ``reasons``: a WARN that shows its
    figure and gives no verdict, as the report marks a busy run."""
    if not reasons or check.status == INFO:
        return check
    return replace(
        check,
        status=WARN,
        detail=f"{check.detail}; {' and '.join(reasons)} meanwhile: "
        "not verdict-grade, the machine was busy",
        fix=AGAIN,
    )


def gpu_load(
    label: str, share: float | None, others: int | None, library: str, processes: str
) -> Check:
    """One line per GPU: what its probes measured of the machine's load, and what they could
    not (a run too short for a share; a backend that lists no processes)."""
    cpus = (
        f"other processes took {share:.0%} of the probes' CPUs while they ran"
        if share is not None
        else f"what other processes took of the probes' CPUs: not measured (under {MIN_SPAN:.0f} s)"
    )
    gpu = (
        f"{library} does not list the GPU's processes here: others on it unknown"
        if others is None
        else f"{others or 'no'} other process{'es' if others != 1 else ''} on the GPU ({library})"
    )
    reasons = gpu_took(share, others)
    status = WARN if reasons else PASS if share is not None or others is not None else INFO
    fix = f"{AGAIN}; {processes} lists the GPU's processes" if reasons else None
    return Check(f"{label} load", status, f"{cpus}; {gpu}", fix)
