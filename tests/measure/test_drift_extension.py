"""A window that holds a ramp extends its run (issue 37): diffusion on an H100 at
--min-slices 22 averaged its first 18 slices over a ramp (drift +14.3%)."""

from __future__ import annotations

import json

import pytest

from conftest import milarun
from milarun.measure import diagnostics
from milarun.results import steady


def test_the_rule_goes_on_while_its_full_window_drifts_and_counts_what_it_added():
    rule = diagnostics.RunLength(min_slices=22, deadline=1e12)
    rates = [100.0] * 10 + [117.6] * 12  # 22 slices, the window across the step
    assert not rule.satisfied(rates, 0.5)
    added = 0
    while not rule.satisfied(rates, 0.5):
        rates.append(117.6)
        added += 1
        assert added < 40
    window = steady.window(rates, 0.5)
    assert set(window) == {117.6}  # past the ramp
    record = rule.record().to_dict()
    assert record["drift_extension"] == added and record["stopped_by"] == "target"


def test_a_short_window_is_not_judged_and_a_flat_one_stops_at_once():
    assert diagnostics.RunLength(min_slices=12, deadline=1e12).satisfied(
        [100.0] * 6 + [117.6] * 6, 0.5
    )
    rule = diagnostics.RunLength(min_slices=22, deadline=1e12)
    assert rule.satisfied([100.0] * 22, 0.5) and rule.record().drift_extension == 0


def test_the_extension_stops_at_its_limit():
    rule = diagnostics.RunLength(min_slices=22, deadline=1e12)
    rates = [100.0 + i for i in range(22)]  # a ramp without end: +1 a slice
    while not rule.satisfied(rates, 0.5):
        rates.append(rates[-1] + 1)
    assert rule.drift_extension * 0.5 >= diagnostics.DRIFT_EXTENSION_LIMIT


@pytest.mark.slow
def test_a_run_with_a_ramp_reports_the_settled_rate_and_says_it_extended(tmp_path):
    done = milarun("run", "faulty:ramp", "-o", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = tmp_path.glob("faulty.J0.*.json")
    result = json.loads(path.read_text())
    train = result["timings"]["train"]
    extension = result["diagnostics"]["train"]["extension"]
    assert (
        extension["drift_extension"] > 0 and "drift" not in result["diagnostics"]["train"]["flags"]
    )
    # the window lies after the ramp, and the rate is the settled one
    index = steady.slices(len(train["rates"]), train["slice"])
    first_start = train["slice_ends"][index[0]] - train["slice"]
    assert first_start >= result["metrics"]["ramp_at"]
    settled = [
        r
        for r, end in zip(train["rates"], train["slice_ends"])
        if end - train["slice"] > result["metrics"]["ramp_at"]
    ]
    mean = sum(settled[:-2]) / len(settled[:-2])
    rate = sum(train["rates"][i] for i in index) / len(index)
    assert rate == pytest.approx(mean, rel=0.01)
    before = [
        r
        for r, end in zip(train["rates"], train["slice_ends"])
        if end < result["metrics"]["ramp_at"]
    ]
    assert rate > 1.1 * sum(before[2:]) / len(before[2:])  # the ramp is real: +15% or so
