"""Like with like: the table of how each test relates to the 2020 legacy baselines, the
shipped baselines by name, and the verdict in every output of `report --compare`."""

from __future__ import annotations

import json

import pytest

from conftest import milarun
from milarun.report import comparability
from milarun.run.profile import load_profile
from resultfactory import result, write

LEGACY_V100_SCORE = 1054.78  # the legacy report code's score for baselines/standard/v100


def legacy_summary(tests: dict[str, float]) -> dict:
    """A summary as the legacy milarun wrote it: stats only, no per-run rates."""
    stats = {name: {"n": 2, "min": v, "max": v, "mean": v, "std": 0.0} for name, v in tests.items()}
    return {
        name: {"n": 2, "failures": 0, "train": s, "total": s, "pergpu": {}}
        for name, s in stats.items()
    }


def test_every_standard_test_has_a_row_and_every_row_a_reason():
    standard = {
        comparability.legacy_name(j.fullname) for j in load_profile("standard").select([], [])
    }
    assert standard <= set(comparability.LEGACY), standard - set(comparability.LEGACY)
    for name, (verdict, note) in comparability.LEGACY.items():
        assert verdict in (comparability.YES, comparability.APPROX, comparability.NO), name
        assert (note is None) == (verdict == comparability.YES), name  # approx/no say why
    assert comparability.judge("standard.scaling.4", legacy=True) == comparability.LEGACY["scaling"]
    assert comparability.judge("standard.ssd", legacy=False) == (comparability.YES, None)
    assert comparability.judge("standard.newtest", legacy=True)[0] == comparability.NO


def test_a_summary_without_rates_is_legacy(tmp_path):
    assert comparability.is_legacy(legacy_summary({"standard.vae": 1.0}))
    assert not comparability.is_legacy({"standard.vae": {"n": 1, "rates": [1.0]}})


def test_the_legacy_v100_against_itself_by_name():
    """The shipped file resolves by name and scores as the legacy report code did."""
    done = milarun(
        "report", "baselines/standard/v100.json", "--compare", "standard/v100", "--format", "json"
    )
    assert done.returncode == 0, done.stderr
    scores = json.loads(done.stdout)["scores"]
    assert round(scores["score"], 2) == LEGACY_V100_SCORE
    assert scores["ratio"] == pytest.approx(1.0) and scores["not_compared"] == []
    bad = milarun("report", "baselines/standard/v100.json", "--compare", "standard/nope")
    assert bad.returncode == 1 and "standard/v100" in bad.stderr  # lists the shipped ones
    assert len(bad.stderr.strip().splitlines()) == 1


@pytest.fixture
def against_legacy(tmp_path):
    res = tmp_path / "results"
    for i, (vae, other) in enumerate([(100.0, 10.0), (102.0, 11.0)]):
        write(res, result("standard.vae", f"0.{i}", vae))
        write(res, result("standard.newtest", f"0.{i}", other))
    base = tmp_path / "legacy.json"
    base.write_text(json.dumps(legacy_summary({"standard.vae": 50.0, "standard.newtest": 1.0})))
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps({"standard.vae": 8, "standard.newtest": 8}))
    return res, base, weights


def test_report_says_like_with_like_and_scores_only_alike(against_legacy, tmp_path):
    res, base, weights = against_legacy
    args = ("report", res, "--weights", weights, "--compare", base)
    data = json.loads(milarun(*args, "--format", "json").stdout)
    vae, other = data["tests"]["standard.vae"], data["tests"]["standard.newtest"]
    assert (vae["comparable"], vae["comparable_note"]) == comparability.LEGACY["vae"]
    assert (other["comparable"], other["comparable_note"]) == comparability.NOT_IN_LEGACY
    # a test the 2020 suite lacks is not alike: its 10.5x ratio is shown, not scored
    assert other["perf_ratio"] == pytest.approx(10.5)
    assert data["scores"]["common_tests"] == ["standard.vae"]
    assert data["scores"]["not_compared"] == ["standard.newtest"]
    assert data["scores"]["ratio"] == pytest.approx(101.0 / 50.0)
    text = milarun(*args, "--html", tmp_path / "r.html").stdout
    assert "standard.newtest (no): " + comparability.NOT_IN_LEGACY[1] in text
    assert "Not compared:" in text and all(len(line) <= 100 for line in text.splitlines())
    page = (tmp_path / "r.html").read_text()
    assert comparability.NOT_IN_LEGACY[1] in page and ">no <span" in page


def test_against_a_milarun_baseline_everything_is_alike(against_legacy):
    res, _, weights = against_legacy
    data = json.loads(
        milarun("report", res, "--weights", weights, "--compare", res, "--format", "json").stdout
    )
    assert {t["comparable"] for t in data["tests"].values()} == {"yes"}
    assert data["scores"]["not_compared"] == []


def test_fake_imagenet_tests_are_alike_only_on_the_legacy_sized_set(tmp_path):
    small = comparability.judge(
        "standard.loader", True, {"name": "fake_imagenet", "size": 1000, "synthetic": True}
    )
    assert small == (comparability.APPROX, "fake ImageNet of 1,000 images (legacy: 100,000)")
    full = {"name": "fake_imagenet", "size": 100_000, "synthetic": True}
    assert comparability.judge("standard.loader", True, full) == (comparability.YES, None)
    assert comparability.judge("standard.dcgan", True, full) == comparability.LEGACY["dcgan"]
    assert comparability.judge("standard.convnet", True, None)[1].startswith(
        "fake ImageNet of unknown size"
    )
    # through the summary: the runs on another set are a test of their own (report.variants)
    res = tmp_path / "res"
    for i, size in enumerate([2_000, 2_000, 100_000]):
        write(
            res,
            result(
                "standard.loader",
                f"0.{i}",
                500.0,
                dataset={"name": "fake_imagenet", "size": size, "synthetic": True},
            ),
        )
    base = tmp_path / "legacy.json"
    base.write_text(json.dumps(legacy_summary({"standard.loader": 535.0})))
    data = json.loads(milarun("report", res, "--compare", base, "--format", "json").stdout)
    row = data["tests"]["standard.loader"]
    assert (row["comparable"], row["comparable_note"], row["n"]) == (
        comparability.APPROX,
        "fake ImageNet of 2,000 images (legacy: 100,000)",
        2,
    )
    full_set = data["tests"]["standard.loader [data fake_imagenet 100000 synthetic]"]
    assert full_set["n"] == 1


def test_a_test_the_baseline_lacks_is_not_like_with_like(against_legacy):
    res, base, weights = against_legacy
    legacy = json.loads(base.read_text())
    del legacy["standard.vae"]
    base.write_text(json.dumps(legacy))
    data = json.loads(milarun("report", res, "--compare", base, "--format", "json").stdout)
    vae = data["tests"]["standard.vae"]
    assert (vae["comparable"], vae["comparable_note"]) == comparability.NOT_IN_BASELINE
