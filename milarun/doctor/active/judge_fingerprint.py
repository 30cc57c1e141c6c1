"""`doctor --active`'s silent-data-corruption verdicts: each device's fingerprint
(milarun.doctor.active.fingerprint) against the reference kept for its model and software
stack in the results database (milarun.history.fingerprints), else against its siblings of
the same stack. A mismatch FAILs the device with both hashes. The first clean run of a stack
(every device of it agreeing) is kept as its reference; a reference is never replaced."""

from __future__ import annotations

import datetime as dt
import socket
from collections import Counter, defaultdict
from typing import Any

from milarun import errors
from milarun.doctor.active.judge import Probed
from milarun.doctor.check import FAIL, INFO, PASS, WARN, Check

FIX = (
    "run `milarun doctor --active` again; a device that gives a wrong fingerprint twice "
    "computes wrong without reporting an error: take it out of service and have it replaced"
)


def _found(p: Probed) -> tuple[str, str] | Check | None:
    """(stack, fingerprint) of a probe, a Check where its computation failed, None where
    it did not run (the probe's own checks say why)."""
    phase = p.phase("fingerprint")
    name = f"{p.label} fingerprint"
    if not isinstance(phase, dict):
        return None
    if "error" in phase:
        return Check(name, FAIL, f"the computation raised: {phase['error']}", FIX)
    stack, fingerprint = phase.get("stack"), phase.get("fingerprint")
    if not isinstance(stack, str) or not isinstance(fingerprint, str):
        return Check(name, FAIL, "the probe wrote no fingerprint", FIX)
    if phase.get("finite") is False:
        return Check(name, FAIL, f"{fingerprint}: the computation gave NaN or infinity", FIX)
    return stack, fingerprint


def _model(stack: str) -> str:
    return stack.split(" | ", 1)[0]


def fingerprint_checks(probed: list[Probed], db: str | None = None) -> list[Check]:
    """One check per device whose probe computed a fingerprint (and one more where the
    reference could not be read or kept)."""
    checks: list[Check] = []
    stacks: dict[str, dict[str, str]] = defaultdict(dict)  # stack -> label -> fingerprint
    for p in probed:
        found = _found(p)
        if isinstance(found, Check):
            checks.append(found)
        elif found is not None:
            stacks[found[0]][p.label] = found[1]
    if not stacks:
        return checks
    try:
        # SQLAlchemy: only when there is one to judge; an install without it still judges the
        # devices among themselves (seen on a GPU machine whose environment lacked it)
        from milarun.history import fingerprints
    except ImportError as err:
        why = f"not read: the results database cannot be opened ({err}): `uv sync` installs it"
        checks.append(Check("fingerprint reference", WARN, why))
        for stack, devices in stacks.items():
            checks += _judge(stack, devices, None)
        return checks
    try:
        kept = fingerprints.references(db, list(stacks))
    except (errors.UserError, OSError) as err:
        kept = {}
        checks.append(Check("fingerprint reference", WARN, f"not read: {err}"))
    new: dict[str, tuple[str, str]] = {}
    for stack, devices in stacks.items():
        checks += _judge(stack, devices, kept.get(stack))
        agreed = len(set(devices.values())) == 1
        if stack not in kept and agreed:
            labels = ",".join(devices)
            new[stack] = (next(iter(devices.values())), f"{socket.gethostname()} {labels}")
    if new:
        try:
            fingerprints.keep(db, new)
        except (errors.UserError, OSError) as err:
            checks.append(Check("fingerprint reference", WARN, f"not kept: {err}"))
    return checks


def _judge(stack: str, devices: dict[str, str], reference: Any) -> list[Check]:
    model = _model(stack)
    counts = Counter(devices.values())
    expected, basis = None, ""
    if reference is not None:
        when = dt.datetime.fromtimestamp(reference.made_at, dt.timezone.utc)
        expected = reference.fingerprint
        basis = f"the reference for {model} on this stack ({reference.made_on}, {when:%Y-%m-%d})"
    elif len(devices) >= 3 and counts.most_common(1)[0][1] * 2 > len(devices):
        expected = counts.most_common(1)[0][0]
        basis = f"the other {model} devices"
    out = []
    for label, fingerprint in devices.items():
        name = f"{label} fingerprint"
        if expected is None and len(counts) > 1:
            others = ", ".join(f"{lab} {fp}" for lab, fp in devices.items() if lab != label)
            out.append(
                Check(
                    name,
                    FAIL,
                    f"{fingerprint}, but {others}: the devices of one model and stack disagree "
                    "and no reference tells which one computes wrong (silent data corruption)",
                    FIX,
                )
            )
        elif expected is None:
            out.append(
                Check(
                    name,
                    INFO,
                    f"{fingerprint}: no reference for {model} on this stack yet; this run's, "
                    f"with {len(devices)} device(s) agreeing, is kept as the reference",
                )
            )
        elif fingerprint == expected:
            out.append(Check(name, PASS, f"{fingerprint}: matches {basis}"))
        else:
            out.append(
                Check(
                    name,
                    FAIL,
                    f"{fingerprint}, but {basis} gives {expected}: this device computes wrong "
                    "without reporting an error (silent data corruption)",
                    FIX,
                )
            )
    return out
