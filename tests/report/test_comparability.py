"""Like with like: the table of how each test relates to the 2020 legacy baselines, the
shipped baselines by name, and the verdict in every output of `report --compare`."""

from __future__ import annotations

import json

import pytest

from conftest import milarun
from milarun.report import comparability
from milarun.run.profile import load_profile
from resultfactory import result, write

LEGACY_V100_SCORE = 1054.78
REAL_BSDS = {"name": "bsds500", "size": 200, "synthetic": False}
REAL_IMAGENET = {
    "dataset": {"name": "fake_imagenet", "size": 100_000, "synthetic": True},
    "nocache": True,
}  # the legacy report code's score for baselines/standard/v100


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


def test_the_quick_reference_against_itself_by_name():
    """quick/ci-vm (a milarun summary, busy flags included) reads back and compares."""
    done = milarun(
        "report", "baselines/quick/ci-vm.json", "--compare", "quick/ci-vm", "--format", "json"
    )
    assert done.returncode == 0, done.stderr
    scores = json.loads(done.stdout)["scores"]
    assert scores["ratio"] == pytest.approx(1.0) and scores["not_compared"] == []


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


# What a run on the legacy's own data, under nocache, records.
REAL_MNIST = {"name": "mnist", "size": 60_000, "synthetic": False}
LIKE_2020 = {"dataset": REAL_MNIST, "nocache": True}


def under(nocache: bool | None = True, **settings: object) -> dict:
    """A result's isolation (with ``nocache``) and efficiency settings (``settings``)."""
    isolation = {"cgroups": {}, "cpus": [0], "memory_limit": None, "torch_threads": 1}
    if nocache is not None:
        isolation["nocache"] = nocache
    found: dict = {"isolation": isolation}
    if settings:
        found["efficiency"] = {"settings": settings}
    return found


@pytest.fixture
def against_legacy(tmp_path):
    res = tmp_path / "results"
    for i, (vae, other) in enumerate([(100.0, 10.0), (102.0, 11.0)]):
        write(res, result("standard.vae", f"0.{i}", vae, dataset=REAL_MNIST, **under()))
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
        "standard.loader",
        True,
        {"dataset": {"name": "fake_imagenet", "size": 1000, "synthetic": True}, "nocache": True},
    )
    assert small == (comparability.APPROX, "fake ImageNet of 1,000 images (legacy: 100,000)")
    full = {"dataset": {"name": "fake_imagenet", "size": 100_000, "synthetic": True}}
    full["nocache"] = True
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
                **under(),
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


@pytest.mark.parametrize(
    "test, dataset, note",
    [
        ("vae", ("mnist", 60_000), "synthetic MNIST of 60,000 images (legacy: the real 60,000)"),
        ("reso", ("bsds500", 200), "synthetic BSDS500 of 200 images (legacy: the real 200)"),
        ("ssd", ("coco", 2_500), "synthetic COCO 2017 of 2,500 images (legacy: the real 118,287)"),
        ("wlm", ("wiki2", 9_000), "synthetic WikiText-2 of 9,000 tokens (legacy: the real "),
        (
            "translator",
            ("wmt16", 10),
            "synthetic WMT16 en-de of 10 sentence pairs, an invented language of about 19-20 "
            "tokens a side before BPE (legacy: the",
        ),
        ("recom", ("ml20m", 500), "synthetic MovieLens-20M of 500 users (legacy: the real 138,"),
    ],
)
def test_synthetic_data_is_not_the_legacy_set(test, dataset, note):
    """Every test that read a real data set in 2020 is approx on synthetic data, whatever
    its size; on the real data (the legacy's set) it keeps its row's verdict."""
    name, size = dataset
    synthetic = {"dataset": {"name": name, "size": size, "synthetic": True}, "nocache": True}
    verdict, why = comparability.judge(f"standard.{test}", True, synthetic)
    assert verdict == comparability.APPROX and why.startswith(note), why
    real = {"dataset": {"name": name, "size": None, "synthetic": False}, "nocache": True}
    assert comparability.judge(f"standard.{test}", True, real) == comparability.LEGACY[test]
    unknown = comparability.judge(f"standard.{test}", True, {"nocache": True})
    assert unknown[0] == comparability.APPROX and "data not recorded" in unknown[1]


def test_the_data_table_is_what_the_models_read():
    """LEGACY_DATA names the set each legacy test's module reads (milabench.datasets.READ_BY,
    itself held to the models' imports by the doctor tests)."""
    from milabench.datasets import READ_BY

    for job in load_profile("standard").select([], []):
        name = comparability.legacy_name(job.fullname)
        read = READ_BY.get(job.experiment.split(":")[0], ())
        legacy = comparability.LEGACY_DATA.get(name)
        assert read == ((legacy.name,) if legacy else ()), name


def test_tf32_is_approx_for_the_work_it_changes():
    cudnn = {"cudnn": True, "matmul": False}
    both = {"cudnn": True, "matmul": True}
    # convolutions and RNNs on cuDNN run as TF32 by default (Ampere and later)
    verdict, why = comparability.judge("standard.convnet", True, {**REAL_IMAGENET, "tf32": cudnn})
    assert verdict == comparability.APPROX
    assert why == "fp32 cuDNN convolutions/RNNs as TF32 (legacy: no TF32)"
    # vae has no convolution or RNN: only TF32 matmuls change it
    assert comparability.judge("standard.vae", True, {**LIKE_2020, "tf32": cudnn}) == (
        comparability.YES,
        None,
    )
    assert (
        "fp32 matmuls as TF32"
        in comparability.judge("standard.vae", True, {**LIKE_2020, "tf32": both})[1]
    )
    # the fp16 tests run their convolutions and matmuls in fp16: only their own note
    fp16 = comparability.judge("standard.convnet_fp16", True, {**REAL_IMAGENET, "tf32": both})
    assert fp16 == comparability.LEGACY["convnet_fp16"]
    scaling = comparability.judge("standard.scaling.2", True, {"tf32": cudnn})
    assert scaling[0] == comparability.APPROX and "TF32" in scaling[1]


def test_nocache_is_approx_for_the_tests_that_read_data():
    off = comparability.judge("standard.vae", True, {**LIKE_2020, "nocache": False})
    assert off == (
        comparability.APPROX,
        "without nocache: data read through the page cache (legacy: nocache)",
    )
    unknown = comparability.judge("standard.vae", True, {"dataset": REAL_MNIST})
    assert unknown == (comparability.APPROX, "nocache not recorded (legacy: nocache)")
    # a test that reads no data set reads nothing the page cache could keep
    assert comparability.judge("standard.toy_reg", True, {"nocache": False}) == (
        comparability.YES,
        None,
    )
    assert comparability.judge("standard.cart", True, {}) == (comparability.YES, None)


def test_the_report_reads_tf32_and_nocache_from_the_results(tmp_path):
    """What each result records (efficiency.settings on a TF32 device, isolation.nocache)
    reaches the verdict through the summary, also through a written summary file."""
    res = tmp_path / "res"
    on_a100 = {"tf32_capable": True, "tf32_matmul": False, "tf32_cudnn": True}
    on_v100 = {"tf32_capable": False, "tf32_matmul": False, "tf32_cudnn": True}
    for i in range(2):
        write(
            res,
            result("standard.reso", f"0.{i}", 80.0, dataset=REAL_BSDS, **under(False, **on_a100)),
        )
        write(res, result("standard.toy_reg", f"0.{i}", 9.0, **under(False, **on_v100)))
    base = tmp_path / "legacy.json"
    base.write_text(json.dumps(legacy_summary({"standard.reso": 40.0, "standard.toy_reg": 9.0})))
    summary_file = tmp_path / "summary.json"
    assert milarun("summary", res, "-o", summary_file).returncode == 0
    assert json.loads(summary_file.read_text())["standard.reso"]["tf32"] == {
        "matmul": False,
        "cudnn": True,
    }
    for source in (res, summary_file):
        done = milarun("report", source, "--compare", base, "--format", "json")
        assert done.returncode == 0, done.stderr
        tests = json.loads(done.stdout)["tests"]
        reso, toy = tests["standard.reso"], tests["standard.toy_reg"]
        assert reso["comparable"] == comparability.APPROX
        assert reso["comparable_note"] == (
            "fp32 cuDNN convolutions/RNNs as TF32 (legacy: no TF32); "
            "without nocache: data read through the page cache (legacy: nocache)"
        )
        assert (toy["comparable"], toy["comparable_note"]) == (comparability.YES, None)


def test_a_test_the_baseline_lacks_is_not_like_with_like(against_legacy):
    res, base, weights = against_legacy
    legacy = json.loads(base.read_text())
    del legacy["standard.vae"]
    base.write_text(json.dumps(legacy))
    data = json.loads(milarun("report", res, "--compare", base, "--format", "json").stdout)
    vae = data["tests"]["standard.vae"]
    assert (vae["comparable"], vae["comparable_note"]) == comparability.NOT_IN_BASELINE
