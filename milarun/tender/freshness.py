"""The rules of ``milarun verify`` a tender may require, each applied only where it asks for
it (and otherwise saying what it found): two tie a bid to this tender and to a healthy
machine, one asks for the whole node's power:

- ``fresh``: every run manifest carries the tender's random challenge (``jobs --tender
  FILE`` records it) and started after the tender was written: the runs were made for this
  call, not taken from an older campaign.
- ``doctor``: every device a successful result ran on has a PASS ``doctor --active`` record
  in its run folder, made from DOCTOR_BEFORE before its run started to the run's end.
- ``node-power``: every scored run (a successful run of a test the tender weighs) carries the
  node's energy from its BMC (milarun.measure.nodepower): the ranking's TCO is the node's.
"""

from __future__ import annotations

import datetime as _dt
from collections import defaultdict
from pathlib import Path

from milarun.report import nodeenergy
from milarun.results.run_manifest import RunSpan
from milarun.tender import checks
from milarun.tender.evidence import energy_and_peaks
from milarun.tender.rule import some

CLOCK = 60.0  # a run's clock may be stepped while it runs (NTP): evidence.rule.CLOCK
DOCTOR_BEFORE = 3600.0  # an operator checks the machine, then starts the run


def fresh(bid: checks.Bid) -> checks.Ruling:
    """Runs made for this tender, after it was issued (required: ``require_challenge``)."""
    tender, required = bid.tender, bid.tender.rules.require_challenge
    issued = tender.created_at
    stale: list[str] = []
    for path, run in bid.manifests:
        name = path.name
        if tender.challenge is None or run.challenge != tender.challenge:
            stale.append(f"{name}: no challenge of this tender")
        elif issued is not None and run.started_at < issued - CLOCK:
            stale.append(f"{name}: started before the tender was written")
    if not bid.manifests:
        stale.append("no run manifest")
    made = max(len(bid.manifests) - len(stale), 0)
    return _verdict(
        "fresh",
        required,
        f"{made} of {len(bid.manifests)} run(s) carry its challenge",
        f"{len(stale)} run(s) not made for it: " + "; ".join(stale[: checks.MAX_SHOWN]),
        f"{made} run(s) carry the tender's challenge, started after it was issued",
        bool(stale),
    )


def _verdict(
    rule: str, required: bool, seen: str, failed: str, passed: str, bad: bool
) -> checks.Ruling:
    """A rule the tender may not require: PASS saying what was ``seen``; else FAIL with
    ``failed`` where ``bad``, PASS with ``passed`` otherwise."""
    if not required:
        return checks.Ruling(rule, True, f"not required by the tender: {seen}")
    return checks.Ruling(rule, not bad, failed if bad else passed)


def _started(record: dict[str, object]) -> float | None:
    try:
        when = _dt.datetime.fromisoformat(str(record.get("started")).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.timestamp()


def _vouches(record: dict[str, object], device: str, span: RunSpan) -> bool:
    """Whether a doctor record passed ``device`` in the span of its run."""
    measured, when = record.get("measurements"), _started(record)
    if record.get("verdict") != energy_and_peaks.DOCTOR_PASS or when is None:
        return False
    end = span.finished_at if span.finished_at is not None else when
    in_span = span.started_at - DOCTOR_BEFORE <= when <= end + CLOCK
    return in_span and isinstance(measured, dict) and device in measured


def doctor(bid: checks.Bid) -> checks.Ruling:
    """A PASS ``doctor --active`` per device in its run's span (``require_doctor``)."""
    required = bid.tender.rules.require_doctor
    spans = [(p.parent, run.span) for p, run in bid.manifests]
    records: dict[Path, list[dict[str, object]]] = {}
    missing: list[str] = []
    devices: set[tuple[Path, str]] = set()
    for view, path in zip(bid.loaded.results, bid.loaded.paths, strict=True):
        folder = Path(path).parent
        if view.rate() is None or not view.device.startswith(("cuda", "xpu")):
            continue
        if (folder, view.device) in devices:
            continue
        devices.add((folder, view.device))
        if folder not in records:
            records[folder] = energy_and_peaks.read_doctors(folder)
        span = next((s for f, s in spans if f == folder and Path(path).name in s.results), None)
        if span is None or not any(_vouches(r, view.device, span) for r in records[folder]):
            where = folder.relative_to(bid.root).as_posix()
            missing.append(f"{view.device} in {where}")
    return _verdict(
        "doctor",
        required,
        f"{len(devices) - len(missing)} of {len(devices)} device(s) have a PASS doctor "
        "--active record in their run's span",
        f"{len(missing)} device(s) without a PASS doctor --active record from "
        f"{DOCTOR_BEFORE / 3600:g} h before their run to its end: "
        + ", ".join(missing[: checks.MAX_SHOWN]),
        f"{len(devices)} device(s), each with a PASS doctor --active record",
        bool(missing),
    )


def node_power(bid: checks.Bid) -> checks.Ruling:
    """The node's energy (its BMC) in every scored run (``require_node_power``); a test
    lacking it is named with its runs and the reason they give."""
    required, weights = bid.tender.rules.require_node_power, bid.tender.weights
    scored = [v for v in bid.views if v.rate() is not None and weights.get(v.name, 0) > 0]
    runs: dict[str, int] = defaultdict(int)
    lacking: dict[str, list[str]] = defaultdict(list)
    for view in scored:
        runs[view.name] += 1
        node = view.node_energy
        if not nodeenergy.measured(node):
            lacking[view.name].append(str(node and node.reason or "no BMC configured")[:80])
    without = [
        f"{test} ({len(why)} of {runs[test]} run(s): {why[0]})" for test, why in lacking.items()
    ]
    have = len(scored) - sum(len(why) for why in lacking.values())
    return _verdict(
        "node-power",
        required,
        f"{have} of {len(scored)} scored run(s) carry the node's energy from its BMC",
        f"{len(without)} test(s) without the node's energy from a BMC in every scored run: "
        + some(sorted(without)),
        f"{len(scored)} scored run(s), each with the node's energy from its BMC",
        bool(without),
    )
