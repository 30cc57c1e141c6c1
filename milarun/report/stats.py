"""Uncertainty for the report: bootstrap confidence intervals and significance tests.

The bootstrap resamples runs (not slices): a run is the unit an operator repeats, and the
spread between runs is what a buyer sees. Failed runs are resampled too, so a flaky test's
score interval is wide.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 4000
ALPHA = 0.05
SEED = 20200401  # fixed: the same results always give the same report


@dataclass(frozen=True)
class RunSet:
    """One test's runs as the bootstrap sees them: successful rates and a failure count."""

    rates: Sequence[float]
    failures: int

    @property
    def n(self) -> int:
        return len(self.rates) + self.failures


def weighted_geomean(values: dict[str, float], weights: dict[str, float]) -> float:
    """exp(sum(w ln v) / sum(w)) over the tests in ``values`` (the score of DESIGN section 5)."""
    total = sum(weights[t] for t in values)
    return math.exp(sum(weights[t] * math.log(v) for t, v in values.items()) / total)


def _interval(samples: np.ndarray) -> tuple[float, float]:
    tail = 100 * (1 - CONFIDENCE) / 2
    lo, hi = np.percentile(samples, [tail, 100 - tail])
    return float(lo), float(hi)


# Resamples drawn this many rows at a time: the same draws in the same order as all at
# once (the generator keeps its place between calls), at a fraction of the memory, and
# faster for it.
ROWS = 1024


def _draws(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    """``rows`` resamples' indices into n runs."""
    # int32 indices: the same numbers as int64 below 2**32 from half the random bits
    kind = np.int32 if n < 2**31 else np.int64
    return rng.integers(0, n, size=(rows, n), dtype=kind)


def _resamples(runs: RunSet, rng: np.random.Generator, size: int) -> Iterator[np.ndarray]:
    """``size`` bootstrap resamples of the runs, ROWS at a time: rows of n values, NaN for
    a failed run."""
    values = np.concatenate([np.asarray(runs.rates, dtype=float), np.full(runs.failures, np.nan)])
    for start in range(0, size, ROWS):
        yield values[_draws(rng, min(ROWS, size - start), len(values))]


def _adjusted(
    sample: np.ndarray, penalize_variance: bool, complete: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Per resample: the mean of the successful runs and perf_adj (0 when all failed);
    ``complete``: no failed run among them (no NaN: the same figures, without the masks)."""
    if complete:
        mean = sample.sum(axis=1) / sample.shape[1]
        if not penalize_variance:
            return mean, mean
        var = ((sample - mean[:, None]) ** 2).sum(axis=1) / sample.shape[1]
        return mean, mean - np.minimum(np.sqrt(var), mean)
    ok = ~np.isnan(sample)
    count = ok.sum(axis=1)
    safe = np.where(ok, sample, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = safe.sum(axis=1) / count
        adj = mean.copy()
        if penalize_variance:
            var = (np.where(ok, sample - mean[:, None], 0.0) ** 2).sum(axis=1) / count
            adj = mean - np.minimum(np.sqrt(var), mean)
    adj = np.where(count > 0, (count / sample.shape[1]) * adj, 0.0)
    return mean, adj


# Draws kept for the next test up to this many indices (int32), past which they are drawn
# ROWS at a time as the score's are.
KEPT_DRAWS = 2**24


@functools.lru_cache(maxsize=1)
def _mean_draws(n: int, resamples: int, seed: int) -> np.ndarray:
    """mean_interval's resample indices for n runs, read-only. Each test's generator starts
    at the seed, so every test of n runs draws the same: a fleet report's 25 tests of
    4,000 runs drew the same 16 M numbers 25 times, half of each test's time."""
    draws = _draws(np.random.default_rng(seed), resamples, n)
    draws.flags.writeable = False
    return draws


def mean_interval(
    rates: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float] | None:
    """95% bootstrap percentile interval of the mean rate; None with fewer than 2 runs."""
    if len(rates) < 2:
        return None
    if len(rates) * resamples <= KEPT_DRAWS:
        values, draws = np.asarray(rates, dtype=float), _mean_draws(len(rates), resamples, seed)
        samples: Iterable[np.ndarray] = (
            values[draws[start : start + ROWS]] for start in range(0, resamples, ROWS)
        )
    else:
        samples = _resamples(RunSet(rates, 0), np.random.default_rng(seed), resamples)
    return _interval(np.concatenate([sample.mean(axis=1) for sample in samples]))


def score_interval(
    tests: dict[str, RunSet],
    weights: dict[str, float],
    penalize_variance: bool = False,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[np.ndarray, tuple[float, float]] | None:
    """Bootstrap distribution and 95% interval of the weighted geometric-mean score.

    Each resample draws every test's runs with replacement and recomputes perf_adj and the
    score exactly as the report does (single-run tests are held fixed; None if all are). A
    resample where a scored test has no successful run scores 0 (its log is -inf): that is
    what such a rerun would give.
    """
    names = [t for t in tests if weights.get(t, 0) > 0]
    if not any(tests[t].n >= 2 for t in names):
        return None
    rng = np.random.default_rng(seed)
    total_weight = sum(weights[t] for t in names)
    log_score = np.zeros(resamples)
    for name in names:
        # A test with a single run cannot be resampled: it is held at its value.
        size = resamples if tests[name].n >= 2 else 1
        runs = tests[name]
        complete = runs.failures == 0 and bool(np.isfinite(runs.rates).all())
        adj = np.concatenate(
            [_adjusted(s, penalize_variance, complete)[1] for s in _resamples(runs, rng, size)]
        )
        with np.errstate(divide="ignore"):
            log_score += weights[name] * np.log(np.maximum(adj, 0.0))
    scores = np.exp(log_score / total_weight)
    return scores, _interval(scores)


def ratio_interval(
    ours: np.ndarray, base: np.ndarray | None, base_score: float
) -> tuple[float, float]:
    """Interval of score/baseline score from paired bootstrap draws of both sides."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = ours / (base if base is not None else base_score)
    return (
        _interval(ratios[np.isfinite(ratios)])
        if np.isfinite(ratios).any()
        else (math.nan, math.nan)
    )


@dataclass(frozen=True)
class Significance:
    """Welch's t-test of one test's mean rate against the baseline's."""

    p_value: float | None
    label: str


def welch_verdict(
    mean: float, std: float, n: int, base_mean: float, base_std: float, base_n: int
) -> Significance:
    """'faster'/'slower' when the difference is significant at 5%, else 'no significant
    change'. Works from summary stats (population std) so a baseline file is enough."""
    if n < 2 or base_n < 2 or not all(map(math.isfinite, (mean, std, base_mean, base_std))):
        return Significance(None, "n/a (<2 runs)")
    # The summary keeps the population std; Welch's test wants the sample std.
    s1 = std * math.sqrt(n / (n - 1))
    s2 = base_std * math.sqrt(base_n / (base_n - 1))
    if s1 == 0 and s2 == 0:
        label = (
            "no significant change"
            if mean == base_mean
            else ("faster" if mean > base_mean else "slower")
        )
        return Significance(None if mean == base_mean else 0.0, label)
    from scipy import stats as sps  # a slow import: only where a verdict needs it

    result = sps.ttest_ind_from_stats(mean, s1, n, base_mean, s2, base_n, equal_var=False)
    p = float(result.pvalue)
    if p >= ALPHA:
        return Significance(p, "no significant change")
    return Significance(p, "faster" if mean > base_mean else "slower")
