"""The fault campaign, forged bids (issue 42): a hostile vendor takes the honest package of the
real H100 run (tests/data/gpu-runs), scales one result's rates and count, edits as much of
the evidence beside it as he cares to, re-hashes the MANIFEST and sends it. `milarun verify`
must FAIL each with its reason in one line (the evidence rule), and still pass the honest one
and a fresh run of this machine. Run by faults.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from faultkit import ROOT, Outcome, clean, milarun

import bidkit
import forgery

H100 = ROOT / "tests" / "data" / "gpu-runs" / "h100-2026-11-28" / "modern"
# the run's --min-slices 22 is an argument of its own: a tender that allows it
H100_TENDER = ["--profile", "modern", "--repeat", "1", "--allow-overrides"]


def _evidence(done) -> str:
    """The evidence rule's line of `verify`'s output (empty where there is none)."""
    return next((ln for ln in done.stdout.splitlines() if ln.split()[1:2] == ["evidence"]), "")


def _package(tmp: Path, folder: Path, tender_args: list[str]) -> tuple[Path, Path]:
    tender = tmp / "tender.json"
    milarun("tender", "init", *tender_args, "-o", tender)
    out = tmp / "bid.tar.gz"
    milarun("package", folder, "-o", out, "--tender", tender)  # a failure: verify says it
    return out, tender


def _forged(tmp: Path, edit: Callable[[Path], object], said: str) -> Outcome:
    """The H100 package edited by ``edit`` (its run folder), re-hashed: verify must exit 1
    with the evidence rule FAILed, its line holding ``said``, no traceback, the hashes
    rule passed."""
    out, tender = _package(tmp, H100, H100_TENDER)
    bad = bidkit.edited(out, tmp, lambda folder: edit(folder / "run"))
    done = milarun("verify", bad, "--tender", tender)
    line = _evidence(done)
    failed = [ln.split()[1] for ln in done.stdout.splitlines() if ln.startswith("FAIL")]
    ok = (
        done.returncode == 1
        and clean(done)
        and "hashes" not in failed  # the vendor's MANIFEST holds the edited files' hashes
        and line.startswith("FAIL")
        and said in line
    )
    return ok, 0, f"exit {done.returncode}, FAIL {failed}: {line[:260]}"


def rates_and_count(tmp: Path) -> Outcome:
    """The issue's forgery: every other rule passes it; the log printed the true rates."""
    return _forged(
        tmp,
        lambda run: forgery.scale(run, "modern.llm", 1.2),
        "timings.train.rates[0] 52,814.49964 but logs/modern.llm.J0.0.log line 2 rate",
    )


def log_edited_too(tmp: Path) -> Outcome:
    """The log and the FLOP/s edited to match; the energy record made from the monitor's
    samples is not."""
    return _forged(
        tmp,
        lambda run: forgery.scale(run, "modern.llm", 1.2, log=True, derived=True),
        "energy.examples 393,214.1175 but the rates over the steady window make 471,856.9409",
    )


def above_the_datasheet(tmp: Path) -> Outcome:
    """gemm x1.6 with everything the forger can reach edited: the datasheet is not his."""
    return _forged(
        tmp,
        lambda run: forgery.scale(run, "modern.gemm", 1.6, log=True, derived=True, energy=True),
        "108% of the H100-SXM datasheet's dense peak (bf16 989.5 TFLOP/s): impossible",
    )


def count_without_rates(tmp: Path) -> Outcome:
    return _forged(
        tmp,
        lambda run: forgery.scale(run, "modern.llm", 1.2, rates=False),
        "timings.train.count 609,484.8 leaves 117,964.8 examples before its slices",
    )


def honest_packages(tmp: Path) -> Outcome:
    """The H100 package as it is, and a fresh `jobs quick` run of this machine: the evidence
    rule passes both (other rules, such as busy on a loaded machine, are theirs)."""
    (tmp / "h100").mkdir()
    out, tender = _package(tmp / "h100", H100, H100_TENDER)
    h100 = milarun("verify", out, "--tender", tender)
    fresh = tmp / "fresh"
    ran = milarun("jobs", "quick", "--name", "polynome", "--devices", "cpu:2", "-o", fresh / "run",
                  "-d", tmp / "data")  # fmt: skip
    out, tender = _package(fresh, fresh / "run", ["--profile", "quick", "--name", "polynome",
                                                  "--repeat", "1"])  # fmt: skip
    mine = milarun("verify", out, "--tender", tender)
    lines = [_evidence(h100), _evidence(mine)]
    ok = (
        h100.returncode == 0
        and ran.returncode == 0
        and all(ln.startswith("PASS") for ln in lines)
        and clean(h100)
        and clean(mine)
    )
    return ok, 0, f"H100 exit {h100.returncode}, fresh run exit {mine.returncode}: {lines}"


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "forged: rates and count x1.2": rates_and_count,
    "forged: log too, monitor left": log_edited_too,
    "forged: above the datasheet": above_the_datasheet,
    "forged: count without rates": count_without_rates,
    "honest bids pass evidence": honest_packages,
}
