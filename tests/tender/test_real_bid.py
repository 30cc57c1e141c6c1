"""The tender loop on a real run: `milarun jobs quick --name polynome` (the profile's own
arguments, one CPU slice, bounded by the profile's --min-slices), packed with `milarun
package`, verified with `milarun verify` against a tender made from the quick profile."""

from __future__ import annotations

import json
import tarfile

import pytest

import bidkit
from conftest import milarun
from milarun.tender import verify

# one worker runs the module, so its shared bid is made once
pytestmark = [pytest.mark.xdist_group(name="tender_real_bid"), pytest.mark.slow]  # a real run


@pytest.fixture(scope="module")
def real_bid(tmp_path_factory):
    root = tmp_path_factory.mktemp("real-bid")
    done = milarun(
        "jobs", "quick", "--name", "polynome", "--devices", "cpu:1",
        "-o", root / "run", "-d", root / "data",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    tender = bidkit.tender(root / "tender.json", ["polynome"], repeat=1)
    done = milarun("package", root / "run", "-o", root / "bid.tar.gz", "--tender", tender)
    assert done.returncode == 0, done.stdout + done.stderr
    return root, root / "bid.tar.gz", tender


def measured_busy(root) -> bool:
    """Whether the run's steady window was flagged busy: other processes (the tests of other
    workers) took a quarter or more of its CPU, which the busy rule fails."""
    result = next((root / "run").glob("quick.polynome.J0.0.*.json"))
    return "busy" in json.loads(result.read_text())["diagnostics"]["train"]["flags"]


def test_a_fresh_quick_run_passes_every_rule(real_bid):
    root, bid, tender = real_bid
    done = milarun("verify", bid, "--tender", tender)
    rules = [line for line in done.stdout.splitlines() if line[:4] in ("PASS", "FAIL")]
    assert len(rules) == len(verify.VERIFY_RULES), done.stdout
    busy = measured_busy(root)  # on a quiet machine, none; else the busy rule, and it alone
    assert [line.split()[1] for line in rules if line.startswith("FAIL")] == (
        ["busy"] if busy else []
    ), done.stdout
    assert done.returncode == (verify.RULE_FAILED if busy else 0), done.stdout + done.stderr
    assert (
        "verdict: 1 rule(s) FAIL: busy" if busy else "verdict: every rule passes"
    ) in done.stdout


def test_the_package_holds_the_run_and_its_records(real_bid):
    root, bid, _ = real_bid
    with tarfile.open(bid) as tar:
        names = tar.getnames()
        record = json.load(tar.extractfile("reproducibility.json"))
        facts = json.load(tar.extractfile("bid.json"))
    assert {"MANIFEST", "bid.json", "reproducibility.json", "profile.json", "weights.json"} <= set(
        names
    )
    assert any(n.startswith("run/quick.polynome.J0.0.") for n in names)
    assert "run/logs/quick.polynome.J0.0.log" in names
    kept = [n for n in names if n.startswith("run/.milarun-run.")]
    assert sorted(n.rsplit(".", 1)[1] for n in kept) == ["manifest", "profile", "sysinfo"]
    provenance = record["provenance"]
    assert provenance["uv_lock_sha256"] and "torch" in provenance["packages"]
    assert {"gpu_firmware", "infiniband", "container_image", "nccl", "git"} <= set(provenance)
    assert facts["results"] == 1 and facts["cut_short"] == [] and facts["tender_sha256"]
    assert any(n.startswith("no doctor record") for n in facts["notes"])


def test_the_same_run_fails_a_tender_that_requires_student_cgroups(real_bid, tmp_path):
    root, bid, _ = real_bid
    strict = bidkit.tender(tmp_path / "strict.json", ["polynome"], repeat=1, require_cgroups=True)
    found = verify.verify(bid, strict)
    cgroups = next(c for c in found.checks if c.rule == "cgroups")
    result = next((root / "run").glob("quick.polynome.J0.0.*.json"))
    confined = json.loads(result.read_text())["isolation"]["cgroups"].get("cpuset", "")
    # the quick profile's groups are optional: where this machine has them, the run is in one
    assert cgroups.ok == confined.endswith("/student0"), cgroups
    quiet = not measured_busy(root)
    assert found.exit_code == (0 if cgroups.ok and quiet else verify.RULE_FAILED)
