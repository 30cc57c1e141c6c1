"""The bootstrap draws its resamples a block of rows at a time: the figures must be those of
every resample drawn at once (the report's intervals, a tender's re-derived ones)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from milarun.report import stats


def _at_once(values: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    return values[rng.integers(0, len(values), size=(size, len(values)))]


@pytest.mark.parametrize("runs", [2, 7, 1001])
@pytest.mark.parametrize("resamples", [1, stats.ROWS - 1, 3 * stats.ROWS + 5])
def test_mean_interval_is_that_of_every_resample_drawn_at_once(runs, resamples):
    rates = np.random.default_rng(runs).uniform(90, 110, runs)
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
