"""Golden numbers: a fixture whose report is computed here by hand, not by milarun's code.

Fixture (suite "gold"):
- gold.a (weight 4): steady rates 100, 110, 90, 100 and one run whose rates are all 0
  (a zero rate is a failure): n=5, fail=1.
- gold.b (weight 8): 50, 60, 55 and one OOM-killed run: n=4, fail=1.
- gold.c (weight 2): one exception, one NaN metric: every run failed, not scored.
- gold.d (weight 0): 1000, 1000.
- gold.missing (weight 2): no results.
- a foreign JSON file and a truncated result: skipped.
Baseline (a summary file): gold.a mean 80 (runs 75, 85, 80, 80); gold.b 50, std 2,
3 runs and no per-run rates (the legacy format).
"""

from __future__ import annotations

import itertools
import json
import math
import os

import numpy as np
import pytest
from scipy import stats as sps

from conftest import DATA, milarun
from resultfactory import result, write

WEIGHTS = {
    "gold.a": {"weight": 4},
    "gold.b": {"weight": 8},
    "gold.c": {"weight": 2},
    "gold.d": {"weight": 0},
    "gold.missing": {"weight": 2},
}
BASELINE = {
    "gold.a": {
        "n": 4,
        "failures": 0,
        "train": {"n": 4, "min": 75, "max": 85, "mean": 80.0, "std": 5 / math.sqrt(2)},
        "rates": [75.0, 85.0, 80.0, 80.0],
    },
    "gold.b": {
        "n": 3,
        "failures": 0,
        "train": {"n": 3, "min": 48, "max": 52, "mean": 50.0, "std": 2.0},
    },
}
A = [100.0, 110.0, 90.0, 100.0]
B = [50.0, 60.0, 55.0]


# Every test here on one worker, in a row: the reports below are made once.
pytestmark = pytest.mark.xdist_group(name="report_golden")


@pytest.fixture(scope="module")
def gold(tmp_path_factory):
    root = tmp_path_factory.mktemp("gold")
    res = root / "results"
    for i, rate in enumerate(A):
        write(res, result("gold.a", f"0.{i}", rate, device=f"cpu:{i % 2}"))
    write(res, result("gold.a", "1.0", None, rates=[0.0] * 30))
    for i, rate in enumerate(B):
        write(res, result("gold.b", f"0.{i}", rate, device=f"cpu:{i % 2}"))
    write(res, result("gold.b", "1.0", None, failure={"kind": "oom", "message": "killed"}))
    write(
        res,
        result("gold.c", "0.0", None, failure={"kind": "exception", "message": "ValueError: boom"}),
    )
    write(res, result("gold.c", "0.1", 10.0, metrics={"loss": float("nan")}))
    write(res, result("gold.d", "0.0", 1000.0))
    write(res, result("gold.d", "0.1", 1000.0, device="cpu:1"))
    (res / "notes.json").write_text(json.dumps({"hello": "world"}))
    (res / "gold.a.J9.20260101-000000-000000.json").write_text('{"name": "gold.a", "succ')
    (root / "weights.json").write_text(json.dumps(WEIGHTS))
    (root / "baseline.json").write_text(json.dumps(BASELINE))
    call = [
        "report",
        res,
        "--weights",
        root / "weights.json",
        "--compare",
        root / "baseline.json",
        "--price",
        "30000",
    ]
    done = milarun(*call, "--format", "json")
    assert done.returncode == 0, done.stderr
    text = milarun(*call)  # the same report as text: pinned below
    assert text.returncode == 0, text.stderr
    return json.loads(done.stdout), done.stderr, text.stdout.replace(str(root), "<root>")


PINNED = DATA / "report_gold.txt"


def test_the_text_report_is_pinned(gold):
    """The whole text report of the fixture, as a file: any change to what it says or how
    it is laid out shows here. MILARUN_UPDATE_PINNED=1 rewrites the file (read the diff)."""
    if os.environ.get("MILARUN_UPDATE_PINNED") == "1":
        PINNED.write_text(gold[2])
    assert gold[2] == PINNED.read_text()


def pstd(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def test_per_test_columns(gold):
    tests = gold[0]["tests"]
    a, b = tests["gold.a"], tests["gold.b"]
    assert (a["n"], a["fail"], b["n"], b["fail"]) == (5, 1, 4, 1)
    assert a["perf"] == pytest.approx(100.0)
    assert b["perf"] == pytest.approx(55.0)
    assert a["std%"] == pytest.approx(100 * math.sqrt(50) / 100)
    assert b["std%"] == pytest.approx(100 * pstd(B) / 55)
    assert a["perf_adj"] == pytest.approx(0.8 * 100)
    assert b["perf_adj"] == pytest.approx(0.75 * 55)
    assert a["perf_ratio"] == pytest.approx(100 / 80)
    assert a["perf_ratio_adj"] == pytest.approx(80 / 80)
    assert b["perf_ratio"] == pytest.approx(55 / 50)
    assert b["perf_ratio_adj"] == pytest.approx(41.25 / 50)
    c = tests["gold.c"]
    assert (c["n"], c["fail"], c["perf"], c["perf_adj"]) == (2, 2, None, None)
    assert tests["gold.missing"]["n"] == 0
    d = tests["gold.d"]
    assert d["ci_low"] == d["ci_high"] == pytest.approx(1000.0)


def test_scores(gold):
    scores = gold[0]["scores"]
    score = math.exp((4 * math.log(80) + 8 * math.log(41.25)) / 12)
    base = math.exp((4 * math.log(80) + 8 * math.log(50)) / 12)
    assert scores["score"] == pytest.approx(score)
    assert scores["coverage"] == pytest.approx(12 / 16)
    assert scores["missing"] == ["gold.missing"]
    assert scores["unscored"] == ["gold.c"]
    assert scores["failure_rate"] == pytest.approx(4 / 13)
    assert scores["passed"] is False
    assert scores["failure_kinds"] == {"exception": 1, "nan": 1, "no-rate": 1, "oom": 1}
    assert scores["score_base"] == pytest.approx(base)
    assert scores["ratio"] == pytest.approx(score / base)
    assert scores["price_per_score"] == pytest.approx(30000 / score)


def test_skipped_files_are_listed(gold):
    stderr = gold[1]
    assert "skipped 2 file(s)" in stderr
    assert "notes.json: not a milarun result" in stderr
    assert "gold.a.J9.20260101-000000-000000.json: not valid JSON" in stderr


def _quantile(values, weights, q):
    """Smallest value whose cumulative probability reaches q (exact discrete quantile)."""
    order = np.argsort(values)
    cdf = np.cumsum(np.asarray(weights, dtype=float)[order]) / np.sum(weights)
    return float(np.asarray(values)[order][np.searchsorted(cdf, q)])


def _bootstrap_exact(runs):
    """Every equally likely resample of the runs (None = failed): its perf_adj and mean."""
    adj, means = [], []
    for sample in itertools.product(runs, repeat=len(runs)):
        ok = [v for v in sample if v is not None]
        means.append(sum(ok) / len(ok) if ok else math.nan)
        adj.append(len(ok) / len(runs) * (sum(ok) / len(ok)) if ok else 0.0)
    return np.array(adj), np.array(means)


def test_perf_interval_matches_the_exact_bootstrap(gold):
    a = gold[0]["tests"]["gold.a"]
    _, means = _bootstrap_exact(A)
    w = np.ones(len(means))
    assert _quantile(means, w, 0.015) <= a["ci_low"] <= _quantile(means, w, 0.035)
    assert _quantile(means, w, 0.965) <= a["ci_high"] <= _quantile(means, w, 0.985)


def test_score_interval_matches_the_exact_bootstrap(gold):
    scores = gold[0]["scores"]
    adj_a, _ = _bootstrap_exact(A + [None])
    adj_b, _ = _bootstrap_exact(B + [None])
    # Every pair of resamples is equally likely: the exact score distribution.
    with np.errstate(divide="ignore"):
        grid = np.exp((4 * np.log(adj_a)[:, None] + 8 * np.log(adj_b)[None, :]) / 12).ravel()
    w = np.ones(grid.size)
    low, high = scores["score_ci95"]
    assert _quantile(grid, w, 0.015) <= low <= _quantile(grid, w, 0.035)
    assert _quantile(grid, w, 0.965) <= high <= _quantile(grid, w, 0.985)
    assert low < scores["score"] < high


def test_welch_verdict_by_hand(gold):
    a = gold[0]["tests"]["gold.a"]
    # Sample variances (n - 1) from the runs: ours 100 +/- var 200/3, baseline 80 +/- 50/3.
    v1, v2, n1, n2 = 200 / 3, 50 / 3, 4, 4
    t = (100 - 80) / math.sqrt(v1 / n1 + v2 / n2)
    df = (v1 / n1 + v2 / n2) ** 2 / ((v1 / n1) ** 2 / (n1 - 1) + (v2 / n2) ** 2 / (n2 - 1))
    p = 2 * sps.t.sf(abs(t), df)
    assert a["p_value"] == pytest.approx(p)
    assert a["verdict"] == "faster"
    b = gold[0]["tests"]["gold.b"]
    assert b["verdict"] == "no significant change"  # 55 +/- 5 vs 50 +/- 2.4 on 3 runs
