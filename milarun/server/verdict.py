"""What the server decides of a package: verified as `milarun verify` verifies it, against
the tender a bid names (uploaded by an admin) or, for a plain run, against the rules of the
shipped profile it ran; and the run's like-with-like key.

A run is not answering a call for tenders: the rules that judge a tender's demands (repeats,
coverage, failure rate, cgroups...) are shown but do not decide; the rules that judge whether
its figures are what the machine measured decide (RUN_RULES). A bid must pass every rule.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milarun.errors import InputError
from milarun.history import ingest
from milarun.report import variants
from milarun.results.tender_rules import TenderRules
from milarun.run.profile import PROFILE_DIR, load_profile
from milarun.tender import package, rules, verify

# The rules a pushed run must pass: its files are those hashed, agree with themselves and
# with the evidence written beside them (log, monitor samples, manifest, peaks).
RUN_RULES = ("hashes", "consistency", "evidence")


@dataclass
class PushVerdict:
    """The server's verdict on a pushed run (not tender.acceptance's on a figure)."""

    accepted: bool
    reason: str | None  # one line, when rejected
    report: dict[str, Any]  # verify's JSON, and its text under "text"
    score: float | None


def run_tender(opened: verify.Opened, work: Path) -> tuple[Path, rules.Tender]:
    """The rules of the shipped profile the run names (InputError: none, or not shipped)."""
    names = sorted(
        {str(r.get("profile")) for r in opened.bid.get("runs") or [] if r.get("profile")}
    )
    if not names:
        raise InputError("its bid.json names no profile: push a folder made by `milarun jobs`")
    name = names[0]
    if "/" in name or not (PROFILE_DIR / f"{name}.json").is_file():
        raise InputError(
            f"profile {name[:60]!r} is not one milarun ships: push it as a bid against a tender "
            "an admin uploaded (--tender NAME)"
        )
    data = rules.make_tender(
        name, None, TenderRules(repeat=1, allow_overrides=True), names=_ran(opened, name)
    )
    path = work / "rules.json"
    path.write_text(json.dumps(data))
    return path, rules.load_tender(path)


def _ran(opened: verify.Opened, profile: str) -> list[str]:
    """The profile's jobs the run ran (a scaling test's ``.k`` left out): its tests, not the
    whole suite, are what it is verified against."""
    jobs = load_profile(profile).jobs
    found = set()
    for view in opened.loaded.results:
        short = view.name.removeprefix(f"{profile}.")
        base = short if short in jobs else short.rpartition(".")[0]
        if base in jobs:
            found.add(base)
    return sorted(found)


def judge(
    spooled: Path, opened: verify.Opened, shown_as: str, tender_body: str | None, work: Path
) -> PushVerdict:
    """Verify the opened package (a bid against ``tender_body``, else a run)."""
    if tender_body is not None:
        tender_path = work / "tender.json"
        tender_path.write_text(tender_body)
        tender = rules.load_tender(tender_path)
    else:
        tender_path, tender = run_tender(opened, work)
    found = verify.verify_opened(spooled, tender_path, tender, opened)
    found.package, found.tender = shown_as, "the server's tender" if tender_body else "its profile"
    report = json.loads(verify.to_json(found))
    report["text"] = verify.to_text(found)
    if tender_body is not None:
        failed = [c for c in found.checks if not c.ok]
    else:
        failed = [c for c in found.checks if not c.ok and c.rule in RUN_RULES]
        report["deciding_rules"] = list(RUN_RULES)
    reason = "; ".join(f"{c.rule}: {c.evidence}" for c in failed)[:2000] or None
    return PushVerdict(not failed, reason, report, found.score)


def like_key(run: ingest.RunInput, opened: verify.Opened) -> dict[str, Any]:
    """What two runs must share to be compared like with like: suite, each test's call
    (arguments, data kind, precision settings), software versions and the power cap."""
    views = opened.loaded.results
    first = views[0] if views else None
    system = dict(first.system) if first is not None else {}
    tests: dict[str, Any] = {}
    for view in views:
        tests.setdefault(view.name, _jsonable(variants.setup(view)))
    caps = sorted(
        {str(g.get("power_limit")) for g in system.get("gpus") or [] if isinstance(g, dict)}
        - {"None"}
    )
    return {
        "suite": (first.suite or first.name.split(".")[0]) if first is not None else None,
        "profile_hash": run.profile_hash,
        "synthetic_data": any(v.synthetic_data for v in views),
        "software": {k: system.get(k) for k in ("python", "torch", "cuda", "hip", "driver")},
        "power_cap": caps or None,  # None: the results do not record one
        "tests": tests,
    }


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def devices_of(opened: verify.Opened) -> list[str]:
    """The machine's devices as its results name them (GPU models, else CPU slices)."""
    views = opened.loaded.results
    gpus = {
        str(g.get("name"))
        for v in views
        for g in (v.system.get("gpus") or [])
        if isinstance(g, dict) and g.get("name")
    }
    return sorted(gpus) or sorted({v.device for v in views})[:64]


def open_package(spooled: Path, work: Path, limits: Any) -> verify.Opened:
    """The package extracted into ``work`` (every member checked: milarun.tender.archive)."""
    return verify.open_package(spooled, work, limits)


def packed_tender_sha(opened: verify.Opened) -> str | None:
    found = opened.bid.get("tender_sha256")
    return str(found) if found else None


def has_run(opened: verify.Opened) -> bool:
    return (opened.root / package.RUN).is_dir() and bool(opened.loaded.results)


def scratch(root: Path) -> tempfile.TemporaryDirectory[str]:
    (root / "work").mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix="verify-", dir=root / "work")
