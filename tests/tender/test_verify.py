"""`verify` on synthetic bids: every rule passes on a faithful one, and each kind of
tampering fails the rule made for it (in process: a bid takes a fraction of a second)."""

from __future__ import annotations

import json

import pytest

import bidkit
from milarun import errors
from milarun.tender import package, verify

RATES = {"quick.polynome": 40_000.0, "quick.sine_wave": 900.0}


# one worker runs the module, so its shared bid is made once
pytestmark = pytest.mark.xdist_group(name="tender_verify")


@pytest.fixture(scope="module")
def bid(tmp_path_factory):
    root = tmp_path_factory.mktemp("bid")
    folder = bidkit.synthetic_run(root / "run", RATES)
    tender = bidkit.tender(root / "tender.json", ["polynome", "sine_wave"], require_cgroups=True)
    declared = root / "declared.json"
    declared.write_text(json.dumps({"tests": {"quick.polynome": 30_000.0}, "score": 1000.0}))
    out = package.make_package(folder, root / "bid.tar.gz", tender, declared).out
    return out, tender


def failed(found: verify.Verification) -> list[str]:
    return [c.rule for c in found.checks if not c.ok]


def test_a_faithful_bid_passes_every_rule_and_its_figures_are_rederived(bid):
    out, tender = bid
    found = verify.verify(out, tender)
    assert failed(found) == [], verify.to_text(found)
    assert found.exit_code == 0
    assert found.tests["quick.polynome"]["n"] == 6
    assert found.tests["quick.polynome"]["perf"] == pytest.approx(40_000, rel=0.03)
    low, high = found.tests["quick.polynome"]["ci95"]
    assert low < found.tests["quick.polynome"]["perf"] < high
    assert found.score is not None and found.score_ci is not None
    assert [v.verdict for v in found.verdicts] == ["ACCEPT", "ACCEPT"]
    text = verify.to_text(found)
    assert text.count("PASS  ") == len(found.checks) and "FAIL" not in text
    assert json.loads(verify.to_json(found))["passed"] is True


def test_a_file_changed_after_packing_fails_the_hashes(bid, tmp_path):
    out, tender = bid
    edit = lambda folder: bidkit.edit_results(  # noqa: E731
        folder, lambda d: d.update(hostname="elsewhere")
    )
    found = verify.verify(bidkit.edited(out, tmp_path, edit, manifest_too=False), tender)
    assert failed(found) == ["hashes"]
    assert "changed after packing" in found.checks[0].evidence


def test_an_edited_rate_fails_the_consistency_even_when_rehashed(bid, tmp_path):
    out, tender = bid

    def faster(data):
        rates = data["timings"]["train"]["rates"]
        rates[-5] *= 1.5

    found = verify.verify(
        bidkit.edited(out, tmp_path, lambda f: bidkit.edit_results(f, faster)), tender
    )
    # and its instance log printed that slice's true rate
    assert failed(found) == ["consistency", "evidence"]
    assert "more than the" in next(c for c in found.checks if not c.ok).evidence


def test_a_removed_result_fails_the_tests_rule(bid, tmp_path):
    out, tender = bid

    def remove(folder):
        next((folder / "run").glob("quick.sine_wave.J1.1.*.json")).unlink()

    found = verify.verify(bidkit.edited(out, tmp_path, remove), tender)
    assert "tests" in failed(found)
    assert "quick.sine_wave on cpu:1: 2 of 3 run(s)" in verify.to_text(found)


def test_an_override_fails_the_arguments_rule(bid, tmp_path):
    out, tender = bid
    override = lambda d: d["call"]["argv"].extend(["--batch-size", "512"])  # noqa: E731
    found = verify.verify(
        bidkit.edited(out, tmp_path, lambda f: bidkit.edit_results(f, override)), tender
    )
    # and its run is not like the others: the report keeps it apart as a variant
    assert failed(found) == ["arguments", "comparability"]
    assert "--batch-size 512" in verify.to_text(found)


def test_an_instance_outside_its_student_cgroup_fails_the_cgroups_rule(bid, tmp_path):
    out, tender = bid
    loose = lambda d: d["isolation"]["cgroups"].update(cpuset="/")  # noqa: E731
    found = verify.verify(
        bidkit.edited(out, tmp_path, lambda f: bidkit.edit_results(f, loose)), tender
    )
    assert failed(found) == ["cgroups"]


def test_a_run_cut_short_fails_the_complete_rule(tmp_path):
    folder = bidkit.synthetic_run(tmp_path / "run", RATES, repeat=1, complete=False)
    tender = bidkit.tender(tmp_path / "t.json", ["polynome", "sine_wave"], repeat=1)
    packed = package.make_package(folder, tmp_path / "bid.tar.gz")
    assert any("cut short" in n for n in packed.notes)
    found = verify.verify(packed.out, tender)
    assert failed(found) == ["complete"]
    assert "cut short" in verify.to_text(found)


def test_other_tender_rules_fail_a_bid_made_for_another(bid, tmp_path):
    out, _ = bid
    other = bidkit.tender(tmp_path / "t.json", ["polynome", "vae"], repeat=4)
    found = verify.verify(out, other)
    assert failed(found) == ["tests"]
    text = verify.to_text(found)
    assert "quick.vae on cpu:0: 0 of 4" in text and "also ran quick.sine_wave" in text
    assert "packed for another tender file" in text


def test_the_declared_figures_are_rejected_when_far_above_the_runs(tmp_path):
    folder = bidkit.synthetic_run(tmp_path / "run", RATES)
    declared = tmp_path / "declared.json"
    declared.write_text(json.dumps({"tests": {"quick.polynome": 60_000.0}}))
    packed = package.make_package(folder, tmp_path / "bid.tar.gz", declared=declared)
    found = verify.verify(packed.out, bidkit.tender(tmp_path / "t.json", ["polynome", "sine_wave"]))
    assert [v.verdict for v in found.verdicts] == ["REJECT"]
    assert found.exit_code == verify.REJECTED


def test_package_refuses_what_it_cannot_pack(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(errors.TenderError, match="no milarun result"):
        package.make_package(empty, tmp_path / "x.tar.gz")
    folder = bidkit.synthetic_run(tmp_path / "run", RATES, repeat=1)
    (tmp_path / "taken.tar.gz").write_text("mine")
    with pytest.raises(errors.TenderError, match="file exists"):
        package.make_package(folder, tmp_path / "taken.tar.gz")
    assert (tmp_path / "taken.tar.gz").read_text() == "mine"
    bad = tmp_path / "declared.json"
    bad.write_text(json.dumps({"tests": {"quick.polynome": -1}}))
    with pytest.raises(errors.TenderError, match="quick.polynome"):
        package.make_package(folder, tmp_path / "y.tar.gz", declared=bad)


def test_hostile_values_in_the_packed_files_fail_rules_never_the_verifier(bid, tmp_path):
    """Records a vendor could forge with the MANIFEST re-made: wrong types everywhere."""
    out, tender = bid

    def forge(folder):
        run = folder / "run"
        for path in run.glob(".milarun-run.*"):
            data = json.loads(path.read_text()) if path.suffix != ".profile" else None
            if path.suffix == ".sysinfo":
                path.write_text(json.dumps({"system": "x", "provenance": [1]}))
            elif path.suffix == ".manifest":
                path.write_text(json.dumps({**data, "devices": 5, "instances": {"a": 1}}))
        (folder / "bid.json").write_text(json.dumps({"notes": "not a list"}))

        def garble(d):
            d["call"] = {"argv": ["--x"]}  # no function, another argv
            d["diagnostics"] = {"train": {"throttle": {"slices": "many", "window_slices": 3}}}
            d["timings"]["train"].update(count="lots")

        bidkit.edit_results(folder, garble, first_only=False)
        # a result the reader cannot use is left out (a run missing), never a traceback
        bidkit.edit_results(folder, lambda d: d["timings"]["train"].update(slice_ends=7))
        bidkit.edit_results(folder, lambda d: d.update(call=["--x"]))

    found = verify.verify(bidkit.edited(out, tmp_path, forge), tender)
    assert {"arguments", "consistency", "tests"} <= set(failed(found))
    assert "FAIL" in verify.to_text(found) and found.exit_code == verify.RULE_FAILED


def test_the_doctor_record_of_jobs_doctor_is_packed_and_read(tmp_path):
    folder = bidkit.synthetic_run(tmp_path / "run", RATES, repeat=1)
    tender = bidkit.tender(tmp_path / "t.json", ["polynome", "sine_wave"], repeat=1)
    bare = verify.verify(package.make_package(folder, tmp_path / "bare.tar.gz").out, tender)
    assert any(n.startswith("no doctor --active record") for n in bare.notes)
    record = {"kind": "milarun-doctor-active", "format": 1, "level": "quick", "node": "cn1",
              "verdict": "PASS", "checks": [], "measurements": {}}  # fmt: skip
    (folder / "doctor-active.json").write_text(json.dumps(record))
    (folder / "doctor-active.20260101-000000-000000.json").write_text('{"kind": 1}')
    packed = package.make_package(folder, tmp_path / "bid.tar.gz")
    assert not any(n.startswith("no doctor record") for n in packed.notes)
    found = verify.verify(packed.out, tender)
    assert failed(found) == []  # the records are no results: no rule reads them as such
    assert "doctor --active quick on cn1: PASS (doctor-active.json)" in found.notes
    assert any(n.startswith("doctor record unreadable") and "kind" in n for n in found.notes)
