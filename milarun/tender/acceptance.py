"""Acceptance against declared figures: ACCEPT, REJECT or INCONCLUSIVE, with the risk held.

A vendor declares per-test rates and a score; the buyer accepts a figure when the runs
make it unlikely that the true value is below ``margin x declared``:

- ACCEPT when P(true < margin x declared) < risk;
- REJECT when P(true >= margin x declared) < risk;
- INCONCLUSIVE otherwise, with the number of runs that would decide if the mean and the
  spread stayed as observed.

The probabilities come from the bootstrap over runs (runs are what a vendor repeats). A
test's mean rate uses the bootstrap-t (each resample studentized by its own spread), which
keeps its error rate with few runs where the plain percentile bootstrap, too narrow by
sqrt((n-1)/n) and a normal tail, accepts too often; it is never less cautious than
Student's t. The score (a weighted geometric mean over tests) resamples every test's runs
as the report's interval does (milarun.report.stats), on the log scale, its spread widened
by the same small-sample factor. tests/tender/test_acceptance.py checks by simulation that
the share of wrong ACCEPTs stays within the risk.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from milarun.report import stats

ACCEPT, REJECT, INCONCLUSIVE = "ACCEPT", "REJECT", "INCONCLUSIVE"
MIN_RUNS = 3  # below this there is no spread to judge from
MAX_RUNS = 10_000  # more runs than this "would decide" is no answer
RESAMPLES = 4000


@dataclass(frozen=True)
class Verdict:
    """One figure's verdict and its evidence."""

    subject: str  # a test name, or "score"
    verdict: str
    measured: float | None
    declared: float
    margin: float
    p_below: float | None  # P(true < margin x declared)
    runs: int
    more_runs: int | None = None  # runs to add to decide, when INCONCLUSIVE
    reason: str = ""

    @property
    def threshold(self) -> float:
        return self.margin * self.declared


def _t_quantile(runs: int, risk: float) -> float:
    from scipy import stats as sps  # a slow import: only when judging

    return float(sps.t.ppf(1 - risk, runs - 1))


def _student_p(mean: float, se: float, threshold: float, runs: int) -> tuple[float, float]:
    """Student's t: (P(true < threshold), P(true >= threshold))."""
    from scipy import stats as sps

    below = float(sps.t.sf((mean - threshold) / se, runs - 1))
    return below, 1 - below


@functools.lru_cache(maxsize=8)
def _t_table(risk: float) -> np.ndarray:
    """Student's one-sided t quantile for 1 .. MAX_RUNS runs (index: runs)."""
    from scipy import stats as sps

    runs = np.arange(MAX_RUNS + 1, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.asarray(sps.t.ppf(1 - risk, np.maximum(runs - 1, 1)))


def runs_to_decide(gap: float, spread: float, risk: float, have: int) -> int | None:
    """Runs to add so that ``gap`` (|mean - threshold|) exceeds the one-sided bound of a
    mean of that many runs with this per-run ``spread``; None when no number would."""
    if gap <= 0 or not math.isfinite(spread):
        return None
    if spread == 0:
        return 0
    totals = np.arange(max(have, MIN_RUNS), MAX_RUNS + 1)
    enough = _t_table(risk)[totals] * spread / np.sqrt(totals) < gap
    return int(totals[np.argmax(enough)]) - have if enough.any() else None


def _decide(p_below: float, p_above: float, risk: float) -> str:
    if p_below < risk:
        return ACCEPT
    if p_above < risk:
        return REJECT
    return INCONCLUSIVE


def judge_rate(
    subject: str,
    rates: Sequence[float],
    declared: float,
    margin: float,
    risk: float,
    resamples: int = RESAMPLES,
    seed: int = stats.SEED,
) -> Verdict:
    """The verdict on one test's declared rate from its successful runs' rates."""
    n = len(rates)
    threshold = margin * declared
    values = np.asarray(rates, dtype=float)
    mean = float(values.mean()) if n else None
    if n < MIN_RUNS or mean is None:
        return Verdict(
            subject, INCONCLUSIVE, mean, declared, margin, None, n, MIN_RUNS - n,
            f"{n} successful run(s): at least {MIN_RUNS} are needed to judge",
        )  # fmt: skip
    spread = float(values.std(ddof=1))
    if spread == 0:
        below = 0.0 if mean >= threshold else 1.0
        return Verdict(subject, _decide(below, 1 - below, risk), mean, declared, margin, below, n)
    se = spread / math.sqrt(n)
    rng = np.random.default_rng(seed)
    sample = values[rng.integers(0, n, size=(resamples, n))]
    boot_se = sample.std(axis=1, ddof=1) / math.sqrt(n)
    diff = sample.mean(axis=1) - mean
    with np.errstate(divide="ignore", invalid="ignore"):
        t_star = np.where(boot_se > 0, diff / boot_se, np.sign(diff) * np.inf)
    cut = (mean - threshold) / se
    p_below, p_above = float(np.mean(t_star >= cut)), float(np.mean(t_star <= cut))
    s_below, s_above = _student_p(mean, se, threshold, n)
    p_below, p_above = max(p_below, s_below), max(p_above, s_above)
    verdict = _decide(p_below, p_above, risk)
    more = (
        runs_to_decide(abs(mean - threshold), spread, risk, n) if verdict == INCONCLUSIVE else None
    )
    return Verdict(subject, verdict, mean, declared, margin, p_below, n, more)


def judge_score(
    runs: dict[str, stats.RunSet],
    weights: dict[str, float],
    measured: float,
    declared: float,
    margin: float,
    risk: float,
    resamples: int = RESAMPLES,
) -> Verdict:
    """The verdict on the declared score from every scored test's runs."""
    threshold = margin * declared
    fewest = min((r.n for r in runs.values()), default=0)
    found = stats.score_interval(runs, weights, resamples=resamples) if fewest >= MIN_RUNS else None
    if found is None:
        return Verdict(
            "score", INCONCLUSIVE, measured, declared, margin, None, fewest,
            max(MIN_RUNS - fewest, 0) or None,
            f"a test has {fewest} run(s): at least {MIN_RUNS} each are needed to judge",
        )  # fmt: skip
    with np.errstate(divide="ignore"):
        logs = np.log(found[0])
    center = math.log(measured)
    # the percentile spread of n runs, widened to Student's t with n - 1 degrees of freedom
    from scipy import stats as sps

    widen = _t_quantile(fewest, risk) / float(sps.norm.ppf(1 - risk))
    widen *= math.sqrt(fewest / (fewest - 1))
    mirrored = center - widen * (logs - center)  # the basic bootstrap's true-value draws
    p_below = float(np.mean(mirrored < math.log(threshold)))
    p_above = float(np.mean(mirrored >= math.log(threshold)))
    verdict = _decide(p_below, p_above, risk)
    more = None
    if verdict == INCONCLUSIVE:
        finite = logs[np.isfinite(logs)]
        spread = float(finite.std()) * math.sqrt(fewest) if finite.size else math.inf
        more = runs_to_decide(abs(center - math.log(threshold)), spread, risk, fewest)
    return Verdict("score", verdict, measured, declared, margin, p_below, fewest, more)


def overall(verdicts: list[Verdict]) -> str:
    """REJECT if any figure is rejected, else INCONCLUSIVE if any is, else ACCEPT."""
    found = {v.verdict for v in verdicts}
    return REJECT if REJECT in found else INCONCLUSIVE if INCONCLUSIVE in found else ACCEPT
