"""The bootstrap draws its resamples a block of rows at a time: the figures must be those of
every resample drawn at once (the report's intervals, a tender's re-derived ones); and the
intervals a report starts early are those it would compute."""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest

from milarun.report import build, perf, stats, summary
from milarun.results.folder import load_dir


def _at_once(values: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    return values[rng.integers(0, len(values), size=(size, len(values)))]


@pytest.mark.parametrize("kept", [True, False])  # the draws kept for the next test, or not
@pytest.mark.parametrize("runs", [2, 7, 1001])
@pytest.mark.parametrize("resamples", [1, stats.ROWS - 1, 3 * stats.ROWS + 5])
def test_mean_interval_is_that_of_every_resample_drawn_at_once(runs, resamples, kept, monkeypatch):
    if not kept:
        monkeypatch.setattr(stats, "KEPT_DRAWS", 0)
    # two tests of as many runs in a row: the second's interval is its own
    for seed in (runs, runs + 1):
        rates = np.random.default_rng(seed).uniform(90, 110, runs)
        sample = _at_once(rates, np.random.default_rng(stats.SEED), resamples)
        expected = np.percentile(sample.mean(axis=1), [2.5, 97.5])
        found = stats.mean_interval(list(rates), resamples=resamples)
        assert found == (float(expected[0]), float(expected[1]))


@pytest.mark.parametrize("penalize", [False, True])
def test_score_interval_is_that_of_every_resample_drawn_at_once(penalize):
    source = np.random.default_rng(3)
    tests = {
        "a": stats.RunSet(list(source.uniform(40, 60, 300)), failures=4),
        "b": stats.RunSet(list(source.uniform(900, 1100, 17)), failures=0),
        "c": stats.RunSet([5.0], failures=0),  # one run: held at its value
    }
    weights = {"a": 2.0, "b": 1.0, "c": 1.0}
    resamples = 2 * stats.ROWS + 3
    rng = np.random.default_rng(stats.SEED)
    log_score = np.zeros(resamples)
    for name, runs in tests.items():
        values = np.concatenate([np.asarray(runs.rates), np.full(runs.failures, np.nan)])
        size = resamples if runs.n >= 2 else 1
        _, adj = stats._adjusted(_at_once(values, rng, size), penalize)
        with np.errstate(divide="ignore"):
            log_score += weights[name] * np.log(np.maximum(adj, 0.0))
    expected = np.exp(log_score / sum(weights.values()))
    found = stats.score_interval(tests, weights, penalize, resamples=resamples)
    assert found is not None
    np.testing.assert_array_equal(found[0], expected)
    low, high = np.percentile(expected, [2.5, 97.5])
    assert found[1] == (float(low), float(high))
    assert all(math.isfinite(v) for v in found[1])


def _folder(tmp_path):
    from resultfactory import rate_series, result, write

    rng = random.Random(1)
    for t, base in (("suite.alpha", 100.0), ("suite.beta", 10.0), ("suite.gamma", 1.0)):
        for i in range(6):
            rates = rate_series(base * rng.uniform(0.9, 1.1), noise=0.05, rng=rng)
            write(tmp_path, result(t, f"0.{i}", None, device=f"cuda:{i % 2}", rates=rates))
    write(tmp_path, result("suite.delta", "0.0", 5.0))  # one run: no interval
    return tmp_path


def test_intervals_started_as_the_summary_is_made_are_those_of_the_report(tmp_path):
    """make_report starts each test's bootstrap as summarize makes its entry: the table's
    intervals are those build_report computes on its own, and an entry that is not the
    one started (a summary changed since) gets its own."""
    loaded = load_dir(_folder(tmp_path))
    alone = build.build_report(summary.summarize(loaded.results), loaded=loaded)
    with perf.bootstrap_threads() as pool:
        early = perf.EarlyIntervals(pool)
        made = summary.summarize(loaded.results, early.start)
        assert early.of("suite.alpha", made["suite.alpha"]) is not None
        assert early.of("suite.delta", made["suite.delta"]) is None  # fewer than 2 runs
        changed = {**made["suite.beta"], "rates": list(made["suite.beta"]["rates"])}
        assert early.of("suite.beta", changed) is None
        report = build.build_report(made, loaded=loaded, pool=pool, early=early)
    columns = ["ci_low", "ci_high"]
    pd.testing.assert_frame_equal(report.table[columns], alone.table[columns])
    assert report.table.loc["suite.alpha", "ci_low"] < report.table.loc["suite.alpha", "perf"]
    assert math.isnan(report.table.loc["suite.delta", "ci_low"])
