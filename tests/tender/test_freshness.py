"""A tender may require runs made for it (its challenge in every run manifest, started
after it was written) and a PASS `doctor --active` record per device in each run's span
(issue 46); without those switches the rules say what they found. On the real H100 run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bidkit
from conftest import ROOT, milarun, one_line_error
from milarun.errors import TenderError
from milarun.results import manifest
from milarun.results.tender_rules import TenderRules
from milarun.tender import package, rules, verify

H100 = ROOT / "tests" / "data" / "gpu-runs" / "h100-2026-11-28" / "modern"
BEFORE_THE_RUN = "2026-11-28T00:00:00+00:00"  # the run started at 01:12:30 UTC


@pytest.fixture(scope="module")
def bid(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("fresh")
    tender = rules.make_tender("modern", None, TenderRules(repeat=1, allow_overrides=True))
    path = rules.write_tender(root / "tender.json", tender)
    return package.make_package(H100, root / "bid.tar.gz", path).out, tender


def rule(out: Path, tender: dict, where: Path, name: str) -> tuple[bool, str]:
    path = rules.write_tender(where / "tender.json", tender)
    found = next(c for c in verify.verify(out, path).checks if c.rule == name)
    assert "\n" not in found.evidence
    return found.ok, found.evidence


def with_challenge(challenge: str):
    """The run manifests of an unpacked package given ``challenge``, as `jobs --tender`
    records it."""

    def edit(folder: Path) -> None:
        for kept in (folder / "run").glob("*.manifest"):
            data = json.loads(kept.read_text())
            kept.write_text(json.dumps({**data, "challenge": challenge}))

    return edit


def test_a_tender_has_a_random_challenge():
    one = rules.make_tender("quick", None, TenderRules(repeat=1))
    two = rules.make_tender("quick", None, TenderRules(repeat=1))
    assert len(one["challenge"]) == 32 and one["challenge"] != two["challenge"]
    assert not one["require_challenge"] and not one["require_doctor"]


def test_not_required_the_rules_pass_and_say_what_they_found(bid, tmp_path):
    out, tender = bid
    assert rule(out, tender, tmp_path, "fresh") == (
        True,
        "not required by the tender: 0 of 1 run(s) carry its challenge",
    )
    (tmp_path / "2").mkdir()
    ok, said = rule(out, tender, tmp_path / "2", "doctor")
    assert ok and said.startswith("not required by the tender: 1 of 1 device(s)")


def test_a_run_without_the_tender_s_challenge_fails(bid, tmp_path):
    out, tender = bid
    strict = {**tender, "require_challenge": True}
    assert rule(out, strict, tmp_path, "fresh") == (
        False,
        "1 run(s) not made for it: .milarun-run.20261128-011230-435290.manifest: no challenge "
        "of this tender",
    )


def test_a_run_older_than_the_tender_fails_and_a_fresh_one_passes(bid, tmp_path):
    out, tender = bid
    marked = bidkit.edited(out, tmp_path / "a", with_challenge(tender["challenge"]))
    strict = {**tender, "require_challenge": True}
    (tmp_path / "late").mkdir()
    ok, said = rule(marked, strict, tmp_path / "late", "fresh")
    assert not ok and said.endswith("started before the tender was written")
    (tmp_path / "early").mkdir()
    early = {**strict, "created_at": BEFORE_THE_RUN}
    assert rule(marked, early, tmp_path / "early", "fresh")[0]


def test_a_deleted_doctor_record_fails_where_the_tender_requires_one(bid, tmp_path):
    out, tender = bid
    strict = {**tender, "require_doctor": True}
    (tmp_path / "honest").mkdir()
    assert rule(out, strict, tmp_path / "honest", "doctor") == (
        True,
        "1 device(s), each with a PASS doctor --active record",
    )
    gone = bidkit.edited(out, tmp_path / "a", lambda f: (f / "run" / "doctor-active.json").unlink())
    (tmp_path / "gone").mkdir()
    assert rule(gone, strict, tmp_path / "gone", "doctor") == (
        False,
        "1 device(s) without a PASS doctor --active record from 1 h before their run to its "
        "end: cuda:0 in run",
    )


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ({"challenge": "xyz"}, "'challenge' is not 32 hex digits"),
        ({"require_doctor": "yes"}, "'require_doctor' is not true/false"),
        ({"challenge": None, "require_challenge": True}, "has no 'challenge'"),
    ],
)
def test_a_bad_switch_is_a_one_line_error(tmp_path, edit, said):
    tender = {**rules.make_tender("quick", None, TenderRules(repeat=1)), **edit}
    path = tmp_path / "tender.json"
    path.write_text(json.dumps(tender))
    with pytest.raises(TenderError, match=said):
        rules.load_tender(path)


@pytest.mark.slow  # a real `jobs` run, packed and verified
def test_jobs_with_the_tender_records_its_challenge_and_the_run_is_fresh(tmp_path):
    """The real loop: `tender init --require-challenge`, `jobs --tender`, `package`,
    `verify`: the fresh rule passes; a tender without a challenge is one line."""
    tender = tmp_path / "tender.json"
    init = ["tender", "init", "--profile", "quick", "--name", "polynome", "--repeat", "1"]
    assert milarun(*init, "--require-challenge", "--allow-overrides", "-o", tender).returncode == 0
    out = tmp_path / "run"
    ran = milarun("jobs", "quick", "--name", "polynome", "--devices", "cpu:1", "--tender", tender,
                  "-o", out, "-d", tmp_path / "data", "--", "--min-slices", "4")  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (kept,) = manifest.run_manifests(out)
    assert kept[1].challenge == json.loads(tender.read_text())["challenge"]
    packed = package.make_package(out, tmp_path / "bid.tar.gz", tender).out
    fresh = next(c for c in verify.verify(packed, tender).checks if c.rule == "fresh")
    assert fresh.ok and fresh.evidence.startswith("1 run(s) carry the tender's challenge")

    old = tmp_path / "old.json"
    data = json.loads(tender.read_text())
    del data["challenge"], data["require_challenge"]
    old.write_text(json.dumps(data))
    said = one_line_error(milarun("jobs", "quick", "--tender", old, "-o", tmp_path / "x"))
    assert said.endswith("the tender has no challenge (written before milarun kept one): ask "
                         "the buyer for a tender made by this milarun's `tender init`")  # fmt: skip


def test_the_h200_bid_made_for_its_tender_passes_every_rule():
    """A real bid (tests/data/gpu-runs/h200-2026-11-28): made on the H200 for a tender
    requiring its challenge and a doctor record."""
    folder = ROOT / "tests" / "data" / "gpu-runs" / "h200-2026-11-28"
    found = verify.verify(folder / "bid.tar.gz", folder / "tender.json")
    assert found.passed, verify.to_text(found)
    said = {c.rule: c.evidence for c in found.checks}
    assert said["fresh"] == "1 run(s) carry the tender's challenge, started after it was issued"
    assert said["doctor"] == "1 device(s), each with a PASS doctor --active record"
    assert said["evidence"].endswith(
        "FLOPs per example recomputed by milarun for 2, the datasheet peak applied to 2, "
        "energy bounds (FLOPs per joule, a busy GPU's power and utilisation) to 2, the "
        "doctor's measured GEMM peak to 2"
        "; not applied: device id check: PCI device id in neither the system record nor the "
        "monitor's inventory (2)"
    )
