"""Issue 39 on synthetic bids: a bid measured on a busy machine fails `verify`'s busy rule and
has no probability of being best in `--rank`; the acceptance verdict is read off one interval,
named and printed beside each figure (not the runs' min-max), and an INCONCLUSIVE one says
how many runs would decide; the cgroups rule counts among the results it is given."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import bidkit
from milarun.tender import acceptance, bids, package, ranking, verify

RATES = {"quick.polynome": 40_000.0, "quick.sine_wave": 900.0}
MARGIN, RISK = 0.95, 0.05

pytestmark = pytest.mark.xdist_group(name="tender_busy")


def busy(others: float = 0.6):
    """An edit of every result: its steady window measured while others took its CPUs."""

    def change(data: dict) -> None:
        contention = {"others": others, "cpus": 1, "load": 2.5, "span": 9.0}
        flags = ["busy"] if others >= 0.25 else []  # measure.contention's limit
        train = {"slices": 18, "cv": 0.01, "flags": flags, "contention": contention}
        data["diagnostics"] = {"train": train}

    return lambda folder: bidkit.edit_results(folder, change, first_only=False)


@pytest.fixture(scope="module")
def quiet_bid(tmp_path_factory):
    root = tmp_path_factory.mktemp("bid")
    folder = bidkit.synthetic_run(root / "run", RATES)
    tender = bidkit.tender(root / "tender.json", ["polynome", "sine_wave"])
    return package.make_package(folder, root / "bid.tar.gz", tender).out, tender


def test_a_bid_measured_on_a_busy_machine_fails_the_busy_rule(quiet_bid, tmp_path):
    out, tender = quiet_bid
    quiet = verify.verify(out, tender)
    rule = next(c for c in quiet.checks if c.rule == "busy")
    assert rule.ok and rule.evidence == (  # made before results had a contention record
        "not judged: no contention record in the 12 run(s) (made before milarun kept one, or "
        "steady windows too short)"
    )
    (tmp_path / "calm").mkdir()
    calm = verify.verify(bidkit.edited(out, tmp_path / "calm", busy(0.1)), tender)
    rule = next(c for c in calm.checks if c.rule == "busy")
    assert rule.ok and rule.evidence == (
        "no run measured on a busy machine (others took at most 10% of a run's CPUs; busy "
        "from a quarter)"
    )

    found = verify.verify(bidkit.edited(out, tmp_path, busy(0.6)), tender)
    assert [c.rule for c in found.checks if not c.ok] == ["busy"]
    rule = next(c for c in found.checks if c.rule == "busy")
    assert rule.evidence.startswith(
        "12 of 12 run(s) measured on a busy machine (other processes took a quarter or more "
        "of their CPUs, up to 60%): quick.polynome J0.0 60%"
    )
    assert "re-run them on a quiet machine" in rule.evidence
    assert found.exit_code == verify.RULE_FAILED
    assert "verdict: 1 rule(s) FAIL: busy" in verify.to_text(found)


def test_the_ranking_gives_a_busy_bid_no_chance_of_being_best(quiet_bid, tmp_path):
    """Two bids of the same box minutes apart, one of them busy (13,431 against 24,172 in
    the issue): P(best) was 100% for the quiet one. Now the busy one has none, and P(best)
    is only given among two quiet bids or more."""
    out, _ = quiet_bid
    slow = bidkit.synthetic_run(tmp_path / "slow", {t: r / 2 for t, r in RATES.items()}, seed=3)
    loaded = bidkit.edited(
        package.make_package(slow, tmp_path / "slow.tar.gz").out, tmp_path, busy()
    )
    pair = bids.rank([out, loaded], None, ranking.Costs())
    by_name = {r.name: r for r in pair.rows}
    assert by_name["edited"].p_best is None and by_name["bid"].p_best is None
    assert by_name["edited"].busy_runs == by_name["edited"].measured_runs == 12
    assert by_name["bid"].rank == 1 and by_name["bid"].busy_runs == 0
    assert any(
        n.startswith("edited: 12 of 12 run(s) measured on a busy machine") for n in pair.notes
    )
    assert (
        "P(best) and the stability not given: fewer than two bids measured on a quiet machine"
        in pair.notes
    )

    other = bidkit.synthetic_run(tmp_path / "other", RATES, seed=5)
    other_bid = package.make_package(other, tmp_path / "other.tar.gz").out
    three = bids.rank([out, loaded, other_bid], None, ranking.Costs())
    shares = {r.name: r.p_best for r in three.rows}
    assert shares["edited"] is None
    assert shares["bid"] + shares["other"] == pytest.approx(1.0)
    assert (
        "P(best) and the stability are among the 2 bids measured on a quiet machine" in three.notes
    )


def test_the_issues_figure_is_accepted_and_its_interval_named():
    """verify said `245.318 (95% CI 181.943 - 292.646)`, the min-max of three runs, and
    INCONCLUSIVE for a declared 150 (threshold 142.5) with no number of runs: the bootstrap-t
    of three runs, one draw in nine without spread, could never accept."""
    rates = [181.943, 261.365, 292.646]
    found = acceptance.judge_rate("quick.sine_wave", rates, 150.0, MARGIN, RISK)
    assert found.verdict == acceptance.ACCEPT
    assert found.interval == "90% interval of the mean (Student t, 3 runs)"
    assert (found.low, found.high) == pytest.approx((149.107, 341.529), abs=1e-3)
    assert found.p_below == pytest.approx(0.0446, abs=1e-4) and found.p_below < RISK
    line = acceptance.verdict_line(found, verify._n)
    assert line == (
        "ACCEPT        quick.sine_wave: measured 245.318 over 3 run(s), 90% interval of the "
        "mean (Student t, 3 runs) 149.107 - 341.529; declared 150, threshold 142.5: "
        "P(true < threshold) = 0.045"
    )


@pytest.mark.parametrize("runs", [3, 4, 6, 12, 25])
def test_the_verdict_is_read_off_the_interval_it_prints(runs):
    rng = np.random.default_rng(runs)
    for i in range(60):
        rates = list(rng.lognormal(math.log(1000), 0.15, runs))  # skewed, as rates can be
        declared = float(rng.uniform(850, 1200))
        found = acceptance.judge_rate("t", rates, declared, MARGIN, RISK, resamples=1000, seed=i)
        threshold = MARGIN * declared
        expected = (
            acceptance.ACCEPT
            if threshold < found.low
            else acceptance.REJECT
            if threshold > found.high
            else acceptance.INCONCLUSIVE
        )
        assert found.verdict == expected, found
        assert (found.p_below < RISK) == (found.verdict == acceptance.ACCEPT), found
        if found.verdict == acceptance.INCONCLUSIVE:  # runs to add: never 0 (none: > 10,000)
            assert found.more_runs != 0, found


def test_verify_prints_the_verdicts_interval_beside_each_test(tmp_path):
    folder = bidkit.synthetic_run(tmp_path / "run", RATES, devices=1, noise=0.2, seed=11)
    declared = tmp_path / "declared.json"
    declared.write_text(json.dumps({"tests": {"quick.polynome": 38_000.0}}))
    tender = bidkit.tender(tmp_path / "tender.json", ["polynome", "sine_wave"])
    found = verify.verify(
        package.make_package(folder, tmp_path / "b.tar.gz", tender, declared).out, tender
    )
    text = verify.to_text(found)
    (verdict,) = found.verdicts
    assert verdict.verdict == acceptance.INCONCLUSIVE and verdict.more_runs
    shown = f"{verify._n(verdict.low)} - {verify._n(verdict.high)}"
    # the test's line and its verdict's: the same interval, named, not the runs' min-max
    test_line = next(line for line in text.splitlines() if line.startswith("  quick.polynome:"))
    assert f"(90% interval of the mean (Student t, 3 runs) {shown})" in test_line, text
    assert "95% CI" not in test_line
    verdict_line = next(line for line in text.splitlines() if line.startswith("INCONCLUSIVE"))
    assert f"90% interval of the mean (Student t, 3 runs) {shown}" in verdict_line
    assert (
        f"about {verdict.more_runs:,} more run(s) would decide at the spread seen" in verdict_line
    )
    data = json.loads(verify.to_json(found))
    assert data["tests"]["quick.polynome"]["interval"] == [verdict.low, verdict.high]


def test_the_cgroups_count_is_of_the_results_with_the_uncounted_named(tmp_path):
    """verify said `0 of 24 instance(s) confined` for 26 results: the scaling results, one
    run over several devices, were left out of the count unsaid."""
    folder = bidkit.synthetic_run(tmp_path / "run", {"quick.polynome": 40_000.0}, repeat=1)
    first = sorted(folder.glob("quick.polynome.J0.0.*.json"))[0]
    for k in (1, 2):  # scaling.k: one run over k devices (gpu-progression)
        data = json.loads(first.read_text())
        data.update(name=f"quick.scaling.{k}", job_id=f"0.{k}")
        data["call"]["argv"] = bidkit.quick_argv("quick.scaling")
        (folder / first.name.replace("polynome.J0.0", f"scaling.{k}.J0.{k}")).write_text(
            json.dumps(data)
        )
    tender = bidkit.tender(tmp_path / "tender.json", ["polynome", "scaling"], repeat=1)
    found = verify.verify(package.make_package(folder, tmp_path / "b.tar.gz", tender).out, tender)
    rule = next(c for c in found.checks if c.rule == "cgroups")
    assert rule.evidence == (
        "not required (2 of the 4 result(s) in their own student cgroup; 2 not counted "
        "(quick.scaling.1, quick.scaling.2: not run one per device, so no student group of "
        "their own))"
    ), rule
