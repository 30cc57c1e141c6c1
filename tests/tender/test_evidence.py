"""The ``evidence`` rule (issue 42): a hostile vendor scales one result's rates and count,
edits as much of the evidence beside it as he cares to, re-hashes the MANIFEST; each forgery
FAILs verify with one line naming the file, the field and both values. The honest packages,
the real H100 runs (tests/data/gpu-runs) and a fresh CPU run, pass."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import bidkit
import forgery
from conftest import ROOT
from milarun.results import manifest
from milarun.results.folder import load_dir
from milarun.results.tender_rules import TenderRules
from milarun.tender import package, rules, verify
from milarun.tender.evidence import rule as evidence

H100 = ROOT / "tests" / "data" / "gpu-runs" / "h100-2026-11-28"
LLM = "modern.llm.J0.0.20261128-011230-779674.json"
GEMM = "modern.gemm.J0.0.20261128-011644-328946.json"

pytestmark = pytest.mark.xdist_group(name="tender_evidence")  # one H100 package, made once


@pytest.fixture(scope="module")
def h100(tmp_path_factory):
    """The H100 modern run's package and a tender it answers (its --min-slices 22 is an
    override: allowed)."""
    root = tmp_path_factory.mktemp("h100")
    tender = rules.write_tender(
        root / "tender.json",
        rules.make_tender("modern", None, TenderRules(repeat=1, allow_overrides=True)),
    )
    return package.make_package(H100 / "modern", root / "bid.tar.gz", tender).out, tender


def forged(h100, tmp_path, edit) -> tuple[list[str], str]:
    """The rules the package edited by ``edit`` (its run folder) fails, and the evidence
    rule's line."""
    out, tender = h100
    found = verify.verify(bidkit.edited(out, tmp_path, lambda f: edit(f / "run")), tender)
    line = next(c for c in found.checks if c.rule == "evidence")
    assert "\n" not in line.evidence
    return [c.rule for c in found.checks if not c.ok], line.evidence


@pytest.mark.parametrize("run", ["modern", "modern-diffusion-default", "modern-llm-compile"])
def test_the_real_h100_runs_agree_with_their_evidence(run):
    folder = H100 / run
    found, checked, _ = evidence.problems(folder, load_dir(folder), manifest.run_manifests(folder))
    assert found == [] and checked == len(list(folder.glob("modern.*.json")))


def test_the_h100_package_passes_the_evidence_rule(h100):
    found = verify.verify(*h100)
    line = next(c for c in found.checks if c.rule == "evidence")
    assert line.ok and line.evidence == (
        "7 result(s): each rate and count agrees with its log and its run manifest; 7 with "
        "their GPU monitor's energy; FLOPs per example recomputed by milarun for 7, the "
        "datasheet peak applied to 7, energy bounds (FLOPs per joule, a busy GPU's power and "
        "utilisation) to 7, the doctor's measured GEMM peak to 7"
        "; not applied: device id check: PCI device id in neither the system record nor the "
        "monitor's inventory (7)"
    ), line
    assert found.passed, verify.to_text(found)


def test_rates_and_count_scaled_together_fail_against_the_log(h100, tmp_path):
    """The forgery of the issue: every other rule passes it."""
    failed, line = forged(h100, tmp_path, lambda run: forgery.scale(run, "modern.llm", 1.2))
    assert failed == ["evidence"]
    assert line.startswith(
        f"4 disagreement(s) in 7 result(s): {LLM}: timings.train.rates[0] 52,814.49964 but "
        "logs/modern.llm.J0.0.log line 2 rate 44,012.08304 (and 7 more line(s) of the log)"
    ), line
    assert "steady rate 52,428.55 but logs/modern.llm.J0.0.log line 10 says 43,690.46" in line


def test_the_log_edited_too_fails_against_the_monitor_samples(h100, tmp_path):
    def edit(run):
        forgery.scale(run, "modern.llm", 1.2, log=True, derived=True)

    failed, line = forged(h100, tmp_path, edit)
    assert failed == ["evidence"]
    assert line == (
        f"1 disagreement(s) in 7 result(s): {LLM}: energy.examples 393,214.1175 but the rates "
        "over the steady window make 471,856.9409"
    )


def test_a_rate_beyond_the_datasheet_peak_is_impossible(h100, tmp_path):
    """Everything the forger can reach edited to match: the datasheet is not his."""

    def edit(run):
        forgery.scale(run, "modern.gemm", 1.6, log=True, derived=True, energy=True)

    failed, line = forged(h100, tmp_path, edit)
    assert failed == ["evidence"]
    assert line == (
        f"1 disagreement(s) in 7 result(s): {GEMM}: timings.train's steady rate 1,071.614335 x "
        "1e+12 FLOP/example need 1,071.6 TFLOP/s per device, 108% of the H100-SXM datasheet's "
        "dense peak (bf16 989.5 TFLOP/s): impossible"
    )


def test_a_rate_beyond_the_doctors_measured_peak_fails(h100, tmp_path):
    """Under the datasheet, but 31% over the best GEMM the doctor measured on that GPU."""

    def edit(run):
        forgery.scale(run, "modern.gemm", 1.4, log=True, derived=True, energy=True)

    failed, line = forged(h100, tmp_path, edit)
    assert failed == ["evidence"]
    assert "of the best GEMM `doctor --active` measured on cuda:0 (bf16 717.2 TFLOP/s" in line


def test_a_count_changed_without_its_rates_fails_against_the_log(h100, tmp_path):
    def edit(run):
        forgery.scale(run, "modern.llm", 1.2, rates=False)

    failed, line = forged(h100, tmp_path, edit)
    assert failed == ["consistency", "evidence"]
    assert (
        f"{LLM}: timings.train.count 609,484.8 leaves 117,964.8 examples before its slices "
        "but logs/modern.llm.J0.0.log line 2 count 49,152 at slice 1 leaves"
    ) in line


def test_a_removed_log_and_a_result_from_another_run_fail(h100, tmp_path):
    def edit(run):
        (run / "logs" / "modern.llm.J0.0.log").unlink()
        path = run / GEMM
        data = json.loads(path.read_text())
        data["finished_at"] += 86400  # a better run, the day after
        path.write_text(json.dumps(data))

    failed, line = forged(h100, tmp_path, edit)
    assert failed == ["evidence"]
    assert f"{LLM}: no instance log logs/modern.llm.J0.0.log" in line
    assert (
        f"{GEMM}: finished_at 2026-11-29 01:17:23 UTC but the run manifest that records it ran "
        "from 2026-11-28 01:12:30 UTC to 2026-11-28 01:17:24 UTC"
    ) in line


def test_a_progress_line_off_in_its_last_digit_fails(tmp_path):
    """A figure json wrote is its float exactly: no rounding to hide a change in."""
    folder = tmp_path / "run"
    shutil.copytree(H100 / "modern-llm-compile", folder)
    log = folder / "logs" / "modern.llm.J0.0.log"
    text = log.read_text()
    line = next(x for x in text.splitlines() if x.startswith(forgery.PROGRESS))
    info = json.loads(line[len(forgery.PROGRESS) :])
    info["rate"] *= 1 + 1e-8
    log.write_text(text.replace(line, forgery.PROGRESS + json.dumps(info)))
    found, _, _ = evidence.problems(folder, load_dir(folder), manifest.run_manifests(folder))
    assert found == [
        "modern.llm.J0.0.20261128-014406-196810.json: timings.train.rates[0] 56,465.54995 but "
        "logs/modern.llm.J0.0.log line 2 rate 56,465.55052"
    ]


def test_a_fresh_cpu_run_agrees_with_its_evidence(quick_run):
    """A real `jobs quick` run here: per-device instances and a two-rank scaling job whose
    ranks print into one log."""
    done, folder = quick_run
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found, checked, _ = evidence.problems(folder, load_dir(folder), manifest.run_manifests(folder))
    assert found == [] and checked >= 6, found


def test_a_log_that_is_another_runs_fails(tmp_path):
    folder = bidkit.synthetic_run(tmp_path / "run", {"quick.polynome": 40_000.0}, repeat=1)
    logs = sorted((folder / "logs").glob("*.log"))
    logs[0].write_text(logs[1].read_text())  # cpu:1's log where cpu:0's should be
    found, _, _ = evidence.problems(folder, load_dir(folder), manifest.run_manifests(folder))
    assert found == [
        f"{logs[0].relative_to(folder)}: no 'result: "
        f"{next(folder.glob('quick.polynome.J0.0.*.json')).name}' line: the log is not this "
        "result's run's"
    ]


def test_the_evidence_rule_is_one_of_verify(h100):
    assert Path(evidence.__file__).parent.name == "evidence"
    assert "evidence" in [c.rule for c in verify.verify(*h100).checks]
