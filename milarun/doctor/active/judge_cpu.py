"""`doctor --active`'s CPU-slice verdicts: each slice's GEMM and memory bandwidth against the
other slices (milarun.doctor.active.judge's lines), read with what other processes took of
the slices' CPUs meanwhile, and where each slice really ran."""

from __future__ import annotations

import statistics
from dataclasses import replace

from milarun.doctor.active.busy import AGAIN, cpus_taken, not_verdict_grade
from milarun.doctor.active.judge import Probed, line_of, probe_check, samples_of
from milarun.doctor.active.verdicts import sibling
from milarun.doctor.check import FAIL, PASS, WARN, Check, as_root

CPU_PHASES = ("cpu_gemm", "cpu_memory_bandwidth")


def cpu_checks(units: list[Probed]) -> list[Check]:
    """Every CPU slice's GEMM and memory bandwidth, each slice against the others, and where
    it really ran."""
    checks: list[Check] = []
    for p in units:
        failed = probe_check(p)
        if failed:
            checks.append(failed)
        for phase, title in zip(CPU_PHASES, ("gemm fp32", "memory copy"), strict=True):
            siblings = samples_of(units, phase)
            checks += [
                _others(c, p, phase, units, siblings)
                for c in line_of(p, phase, title, siblings, "slice")
            ]
        got = ((p.data or {}).get("isolation") or {}).get("cpus")
        if got is not None and p.planned_cpus is not None and sorted(got) != sorted(p.planned_cpus):
            checks.append(
                Check(
                    f"{p.label} placement",
                    WARN,
                    f"ran on CPUs {got}, the plan gives it {p.planned_cpus} ({p.placement})",
                    f"a misplaced student group: {as_root('cgroups teardown')}, then "
                    "`... cgroups setup` with the same --devices",
                )
            )
    return checks


OTHERS_MARGIN = 0.1  # a slice whose CPUs others took 10 points more of than its siblings'
BUSY = 0.1  # others took a tenth of every slice's CPUs: the slices were not compared alone


def _others_share(p: Probed, phase: str) -> float | None:
    found = (p.phase(phase) or {}).get("others")
    return float(found) if isinstance(found, int | float) and 0 <= found <= 1 else None


def _others(
    check: Check, p: Probed, phase: str, units: list[Probed], siblings: dict[str, list[float]]
) -> Check:
    """A slice judged slower than its siblings, read with what other processes took of the
    slices' CPUs meanwhile (cpu.with_others). Notably more of its own than of its
    siblings': the verdict stands (a rogue process on a student's slice is what the sibling
    test is for) and the fix names it. Much of every slice's: the slices were measured on a
    busy machine, where the one slowed most is chance, not hardware: a FAIL becomes a WARN
    that says to measure again on an idle machine. Neither: a slower socket or a misplaced
    group, as the check said. And any slice whose CPUs others took a quarter or more of (a
    lone one too): its figure is no verdict but a WARN "not verdict-grade: the machine was
    busy", as the report marks a busy run (milarun.doctor.active.busy, the GPUs' rule too).
    ``siblings``: the samples the check was judged on."""
    judged = sibling(p.label, siblings)
    mine = _others_share(p, phase)
    theirs = [s for u in units if u is not p and (s := _others_share(u, phase)) is not None]
    if judged is not None and judged.status != PASS and mine is not None and theirs:
        median = statistics.median(theirs)
        took = (
            f"other processes took {mine:.0%} of its CPUs meanwhile (its siblings': {median:.0%})"
        )
        if mine - median >= OTHERS_MARGIN:
            return replace(
                check,
                detail=f"{check.detail}; {took}",
                fix="another process ran on this slice's CPUs: find it with "
                "`ps -eo pid,psr,pcpu,comm --sort=-pcpu` and move or stop it",
            )
        if min(mine, *theirs) >= BUSY:
            return replace(
                check,
                status=WARN if check.status == FAIL else check.status,
                detail=f"{check.detail}; {took}: a busy machine, no verdict on this slice",
                fix=AGAIN,
            )
    # as a busy run in the report: its figure shown, never judged (a lone slice, cpu:1,
    # has no sibling to be compared with, and moved 4x between two runs on a busy VM)
    busy = cpus_taken(mine)
    return not_verdict_grade(check, [busy] if busy else [])
