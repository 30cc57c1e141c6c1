"""Acceptance against declared figures: ACCEPT, REJECT or INCONCLUSIVE, with the risk held.

A vendor declares per-test rates and a score; the buyer accepts a figure when the runs
make it unlikely that the true value is below ``margin x declared``:

- ACCEPT when P(true < margin x declared) < risk;
- REJECT when P(true >= margin x declared) < risk;
- INCONCLUSIVE otherwise, with the number of runs that would decide if the mean and the
  spread stayed as observed.

Each verdict is read off one interval, printed beside it: the two-sided (1 - 2 x risk)
interval of the mean (90% at risk 0.05), each end a one-sided bound at the risk. ACCEPT when
the whole interval is above margin x declared, REJECT when it is all below.

A test's interval is Student's t over its runs' rates (runs are what a vendor repeats); from
BOOTSTRAP_T_RUNS runs on, widened to the bootstrap-t's (each resample studentized by its own
spread) where that is wider: skewed runs. With fewer runs the bootstrap-t has too few
distinct resamples for a tail (of 3 runs, 1 in 9 draws has no spread at all: an infinite t,
which made ACCEPT impossible however far above the threshold). The plain percentile bootstrap
(the report's 95% CI), too narrow by sqrt((n-1)/n) with a normal tail, accepts too often and
is never used here. The score (a weighted geometric mean over tests) resamples every test's
runs as the report's interval does (milarun.report.stats), on the log scale, its spread
widened to Student's t. tests/tender/test_acceptance.py checks by simulation that the share
of wrong ACCEPTs stays within the risk.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from milarun.report import stats

ACCEPT, REJECT, INCONCLUSIVE = "ACCEPT", "REJECT", "INCONCLUSIVE"
MIN_RUNS = 3  # below this there is no spread to judge from
BOOTSTRAP_T_RUNS = 10  # runs from which the bootstrap-t's tail is more than a few draws
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
    low: float | None = None  # the interval the verdict is read off (module docstring)
    high: float | None = None
    interval: str = ""  # its name: level, what of, method, runs

    @property
    def threshold(self) -> float:
        return self.margin * self.declared


@dataclass(frozen=True)
class Interval:
    """The interval a verdict is read off: ``low`` and ``high`` each a one-sided bound at
    the risk, and its name."""

    low: float
    high: float
    name: str


def interval_name(what: str, method: str, runs: str, risk: float) -> str:
    """E.g. ``90% interval of the mean (Student t, 3 runs)``."""
    return f"{1 - 2 * risk:.0%} interval of the {what} ({method}, {runs})"


def _t_star(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """The bootstrap-t's draws: each resample's mean less the mean, over its own se."""
    n = len(values)
    rng = np.random.default_rng(seed)
    sample = values[rng.integers(0, n, size=(resamples, n))]
    boot_se = sample.std(axis=1, ddof=1) / math.sqrt(n)
    diff = sample.mean(axis=1) - values.mean()
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.where(boot_se > 0, diff / boot_se, np.sign(diff) * np.inf))


def _rate_bounds(
    values: np.ndarray, risk: float, resamples: int, seed: int
) -> tuple[Interval, np.ndarray | None]:
    """The interval of a mean over 2 runs or more, and the bootstrap-t draws it used."""
    n = len(values)
    mean, spread = float(values.mean()), float(values.std(ddof=1))
    if spread == 0:
        return Interval(mean, mean, interval_name("mean", "no spread", f"{n} runs", risk)), None
    se = spread / math.sqrt(n)
    half = _t_quantile(n, risk) * se
    low, high, method, t_star = mean - half, mean + half, "Student t", None
    if n >= BOOTSTRAP_T_RUNS:
        # the ends where P(t* >= cut) < risk and P(t* <= cut) < risk start to hold: the
        # K-th largest and the K-th smallest draw
        t_star = _t_star(values, resamples, seed)
        ordered, k = np.sort(t_star), math.ceil(risk * resamples)
        boot_low, boot_high = mean - ordered[-k] * se, mean - ordered[k - 1] * se
        if boot_low < low or boot_high > high:
            method = "Student t widened to the bootstrap-t"
        low, high = min(low, boot_low), max(high, boot_high)
    name = interval_name("mean", method, f"{n} runs", risk)
    return Interval(float(low), float(high), name), t_star


def rate_interval(
    rates: Sequence[float], risk: float, resamples: int = RESAMPLES, seed: int = stats.SEED
) -> Interval | None:
    """The interval a declared rate is judged by (module docstring); None under 2 runs."""
    values = np.asarray(rates, dtype=float)
    return _rate_bounds(values, risk, resamples, seed)[0] if len(values) >= 2 else None


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
    found, t_star = _rate_bounds(values, risk, resamples, seed)
    read_off = (found.low, found.high, found.name)  # Verdict's last three fields
    spread = float(values.std(ddof=1))
    if spread == 0:
        below = 0.0 if mean >= threshold else 1.0
        verdict = _decide(below, 1 - below, risk)
        return Verdict(subject, verdict, mean, declared, margin, below, n, None, "", *read_off)
    se = spread / math.sqrt(n)
    p_below, _ = _student_p(mean, se, threshold, n)
    if t_star is not None:
        p_below = max(p_below, float(np.mean(t_star >= (mean - threshold) / se)))
    # read off the interval (its ends: the one-sided bounds at the risk), as it is printed
    if threshold < found.low:
        verdict = ACCEPT
    elif threshold > found.high:
        verdict = REJECT
    else:
        verdict = INCONCLUSIVE
    more = None
    if verdict == INCONCLUSIVE:
        # as far as the interval reaches on the threshold's side, over Student's own reach
        half = (mean - found.low) if mean >= threshold else (found.high - mean)
        widen = max(half / (_t_quantile(n, risk) * se), 1.0)
        more = runs_to_decide(abs(mean - threshold), spread * widen, risk, n)
        more = max(more, 1) if more is not None else None
    return Verdict(subject, verdict, mean, declared, margin, p_below, n, more, "", *read_off)


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
    # the ends where p_below < risk and p_above < risk start to hold: K-th smallest, largest
    ordered, k = np.sort(mirrored), math.ceil(risk * len(mirrored))
    with np.errstate(over="ignore"):
        low, high = float(np.exp(ordered[k - 1])), float(np.exp(ordered[-k]))
    method = "bootstrap over runs widened to Student t"
    more = None
    if verdict == INCONCLUSIVE:
        finite = logs[np.isfinite(logs)]
        spread = float(finite.std()) * math.sqrt(fewest) if finite.size else math.inf
        more = runs_to_decide(abs(center - math.log(threshold)), spread, risk, fewest)
        more = max(more, 1) if more is not None else None
    return Verdict(
        "score", verdict, measured, declared, margin, p_below, fewest, more, "", low, high,
        interval_name("score", method, f"{fewest}+ runs of each test", risk),
    )  # fmt: skip


def overall(verdicts: list[Verdict]) -> str:
    """REJECT if any figure is rejected, else INCONCLUSIVE if any is, else ACCEPT."""
    found = {v.verdict for v in verdicts}
    return REJECT if REJECT in found else INCONCLUSIVE if INCONCLUSIVE in found else ACCEPT


def verdict_line(d: Verdict, number: Callable[[float | None], str]) -> str:
    """One verdict as `verify` prints it, the interval it is read off named beside it."""
    p = "-" if d.p_below is None else f"{d.p_below:.3f}"
    read_off = f", {d.interval} {number(d.low)} - {number(d.high)}" if d.interval else ""
    more = ""
    if d.verdict == INCONCLUSIVE and not d.reason:  # a reason says what it lacks
        more = (
            f"; about {d.more_runs:,} more run(s) would decide at the spread seen"
            if d.more_runs is not None
            else f"; no number of runs up to {MAX_RUNS:,} would decide at the spread seen"
        )
    why = f"; {d.reason}" if d.reason else ""
    return (
        f"{d.verdict:<12}  {d.subject}: measured {number(d.measured)} over {d.runs} run(s)"
        f"{read_off}; declared {number(d.declared)}, threshold {number(d.threshold)}: "
        f"P(true < threshold) = {p}{more}{why}"
    )
