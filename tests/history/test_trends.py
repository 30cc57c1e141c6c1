"""The verdicts of milarun.history.trends on series of known rates."""

from __future__ import annotations

import random

import numpy as np
import pytest

from milarun.errors import UsageError
from milarun.history import trends
from resultfactory import rate_series

DAY = 86_400.0


def instance(run: int, rate: float | None, *, test="quick.a", node="n1", gpu=None, **kw):
    """One instance of ``test`` in run ``run`` (a day apart), its steady slices around
    ``rate`` with 1% noise (None: failed)."""
    rng = random.Random(f"{run} {test} {node} {gpu}")
    steady = rate_series(rate, noise=0.01, rng=rng)[-20:-2] if rate is not None else None
    fields = dict(
        test=test,
        machine="lab",
        run_id=run,
        started_at=run * DAY,
        repeat=0,
        node=node,
        device="cuda:0",
        gpu=gpu,
        args_hash="same",
        rate=rate,
        sample=trends.Sample.of(np.asarray(steady)) if steady else None,
        failure_kind=None if rate is not None else "crash",
        driver="550.1",
        flags=None,
        throttle=None,
    )
    fields.update(kw)
    return trends.Instance(**fields)


def verdicts(found, by="test", **options):
    series = trends.build_points(found, by)
    for points in series.values():
        trends.judge(points, trends.Options(by=by, **options))
    if by != "test":
        trends.judge_siblings(series, trends.Options(by=by, **options))
    return {name: [p.verdict for p in points] for name, points in series.items()}


def test_two_consecutive_slower_points_make_a_regression():
    rates = [100, 101, 99, 100, 90, 89]
    found = verdicts([instance(i, r) for i, r in enumerate(rates)])
    assert found == {
        "quick.a @ lab": [
            trends.INSUFFICIENT,
            trends.INSUFFICIENT,
            trends.NO_CHANGE,
            trends.NO_CHANGE,
            trends.SUSPICIOUS,
            trends.REGRESSION,
        ]
    }


def test_one_slow_point_stays_suspicious_and_does_not_become_the_baseline():
    rates = [100, 100, 100, 80, 100, 80, 100]
    found = verdicts([instance(i, r) for i, r in enumerate(rates)])["quick.a @ lab"]
    assert found[3:] == [trends.SUSPICIOUS, trends.NO_CHANGE, trends.SUSPICIOUS, trends.NO_CHANGE]


def test_small_changes_and_improvements():
    rates = [100, 100, 100, 97, 103, 120]
    found = verdicts([instance(i, r) for i, r in enumerate(rates)])["quick.a @ lab"]
    assert found[2:] == [trends.NO_CHANGE] * 3 + [trends.IMPROVEMENT]
    # the threshold is the user's: 2% makes the 3% drop count
    strict = verdicts([instance(i, r) for i, r in enumerate(rates)], threshold=0.02)
    assert strict["quick.a @ lab"][3] == trends.SUSPICIOUS


def test_other_arguments_start_a_new_baseline_and_failures_are_suspicious():
    found = [instance(i, 100.0) for i in range(3)]
    found += [instance(3, 50.0, args_hash="other"), instance(4, None)]
    series = trends.build_points(found, "test")["quick.a @ lab"]
    trends.judge(series, trends.Options())
    assert series[3].verdict == trends.INSUFFICIENT  # nothing measured alike before it
    assert "other arguments or data than the point before" in series[3].notes
    assert series[4].verdict == trends.SUSPICIOUS
    assert "1 of 1 failed (crash)" in series[4].notes


def test_what_changed_rides_along():
    found = [instance(i, 100.0) for i in range(3)]
    found.append(
        instance(
            3,
            80.0,
            driver="560.2",
            flags=["drift", "few-slices"],
            throttle={
                "slices": 3,
                "window_slices": 18,
                "gpus": {"cuda:0": {"slices": 3, "reasons": {"SwThermalSlowdown": 3}}},
            },
        )
    )
    series = trends.build_points(found, "test")["quick.a @ lab"]
    trends.judge(series, trends.Options())
    point = series[3]
    assert point.verdict == trends.SUSPICIOUS
    assert "driver 550.1 -> 560.2" in point.notes
    assert "steady window: drift" in point.notes  # few-slices is no alert
    assert "throttled in 1 instance(s)" in point.notes


def test_a_gpu_slower_than_its_siblings_is_suspicious_and_the_series_follow_the_uuid():
    found = []
    for run in range(2):
        for gpu, node in (("GPU-a", "n1"), ("GPU-b", "n1"), ("GPU-c", "n2")):
            rate = 70.0 if (gpu == "GPU-c" and run == 1) else 100.0
            # GPU-a moved to n2 in run 1: still one series
            found.append(instance(run, rate, gpu=gpu, node="n2" if gpu == "GPU-a" else node))
    judged = verdicts(found, by="gpu")
    assert judged["quick.a @ GPU-c"] == [trends.INSUFFICIENT, trends.SUSPICIOUS]
    assert judged["quick.a @ GPU-a"] == [trends.INSUFFICIENT, trends.INSUFFICIENT]
    by_node = verdicts(found, by="node")
    assert set(by_node) == {"quick.a @ lab/n1", "quick.a @ lab/n2"}


def test_options_are_checked():
    with pytest.raises(UsageError, match="--by"):
        trends.Options(by="rack")
    with pytest.raises(UsageError, match="--threshold"):
        trends.Options(threshold=5)
    with pytest.raises(UsageError, match="--window"):
        trends.Options(window=0)


def busy(run: int, rate: float, **kw):
    """An instance measured while other processes took its CPUs (its ``busy`` flag)."""
    return instance(run, rate, flags=["busy", "few-slices"], **kw)


def test_a_busy_point_is_shown_with_its_change_and_never_judged():
    """Issue 39: two points measured on a busy machine were a Regression (an alert, exit 3
    of `db regressions --fail-on regression`): they are Busy, with their change beside."""
    found = [instance(i, r) for i, r in enumerate([100, 101, 99, 100])]
    found += [busy(4, 60.0), busy(5, 59.0)]
    series = trends.build_points(found, "test")["quick.a @ lab"]
    trends.judge(series, trends.Options())
    assert [p.verdict for p in series[-2:]] == [trends.BUSY, trends.BUSY]
    assert series[-1].change == pytest.approx(-0.41, abs=0.01) and series[-1].baseline_points == 4
    assert "machine busy in 1 of 1 instance(s): not judged" in series[-1].notes
    assert not trends.alerts({"s": series}, (trends.REGRESSION, trends.SUSPICIOUS))


def test_a_busy_point_joins_no_baseline_and_neither_makes_nor_breaks_a_regression():
    # slower, busy, slower: the two judged slower points in a row are a Regression
    found = [instance(i, 100.0) for i in range(3)] + [instance(3, 80.0), busy(4, 50.0)]
    found.append(instance(5, 79.0))
    assert verdicts(found)["quick.a @ lab"][3:] == [
        trends.SUSPICIOUS,
        trends.BUSY,
        trends.REGRESSION,
    ]
    # a busy point, however fast, is no baseline: the quiet point after it is no change
    fast = [instance(0, 100.0), instance(1, 100.0), busy(2, 200.0), busy(3, 200.0)]
    fast.append(instance(4, 100.0))
    judged = verdicts(fast)["quick.a @ lab"]
    assert judged == [trends.INSUFFICIENT] * 2 + [trends.BUSY] * 2 + [trends.NO_CHANGE]
    # with no baseline yet, a busy point is Busy, not Insufficient data
    assert verdicts([busy(0, 100.0)])["quick.a @ lab"] == [trends.BUSY]


def test_a_busy_gpu_is_not_called_slower_than_its_siblings():
    found = []
    for run in range(2):
        for gpu in ("GPU-a", "GPU-b", "GPU-c"):
            slow = gpu == "GPU-c" and run == 1
            found.append((busy if slow else instance)(run, 50.0 if slow else 100.0, gpu=gpu))
    judged = verdicts(found, by="gpu")
    assert judged["quick.a @ GPU-c"] == [trends.INSUFFICIENT, trends.BUSY]
    assert judged["quick.a @ GPU-a"] == judged["quick.a @ GPU-b"] == [trends.INSUFFICIENT] * 2
