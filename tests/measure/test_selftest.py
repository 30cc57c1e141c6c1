"""``milarun selftest``: its numbers are produced and its verdict follows its targets.

The values depend on the machine (and its load), so only their presence, finiteness and
the consistency of the verdict with the exit code are checked here; the arithmetic is
checked on a fake measurement.
"""

from __future__ import annotations

import json
import math

import pytest

from conftest import milarun
from milarun.measure import selftest
from milarun.measure.selftest import Measurement


def fake(**changes) -> Measurement:
    """1 ms steps of 64 examples, 1000 steps: bare 1.000 s, instrumented 1.004 s."""
    values = dict(
        step_time=0.001,
        batch=64,
        steps=1000,
        instrumented_steps=1000,
        bare_wall=1.0,
        instrumented_wall=1.004,
        measured_rate=63_700.0,
        rate_source="steady",
        slices=2,
        log_duration=1.003,
        outside_blocks=0.002,
        syncs=2,
        overhead_target=0.5,
        error_target=0.5,
    )
    values.update(changes)
    return Measurement(**values)


def test_overhead_and_error_arithmetic():
    m = fake()
    assert m.true_rate == 64_000.0
    assert m.overhead_pct == pytest.approx(0.4)
    assert m.error_pct == pytest.approx(-0.46875)
    assert m.outside_pct == pytest.approx(100 * 0.002 / 1.003)
    assert m.outside_us_per_step == pytest.approx(2.0)
    assert m.overhead_pass and m.error_pass and m.passed and m.failures() == []
    assert selftest.exit_code([m]) == 0


def test_missed_targets_fail_and_say_why():
    slow = fake(instrumented_wall=1.006)  # 0.6% overhead
    wrong = fake(measured_rate=64_000 * 1.006, rate_source="full-log")  # +0.6% error
    assert slow.overhead_pass is False and slow.error_pass and not slow.passed
    assert wrong.error_pass is False and wrong.overhead_pass and not wrong.passed
    assert "overhead 0.600% > 0.5%" in slow.failures()[0]
    assert "+0.600%" in wrong.failures()[0] and "full-log" in wrong.failures()[0]
    assert selftest.exit_code([fake(), slow]) == 1
    # No target: reported, never judged.
    info = fake(instrumented_wall=2.0, overhead_target=None, error_target=None, measured_rate=1.0)
    assert info.overhead_pass is None and info.error_pass is None and info.passed
    data = json.loads(selftest.render_json([fake(), wrong], seconds=1.0))
    assert data["passed"] is False and len(data["failures"]) == 1
    assert data["measurements"][1]["error_pct"] == pytest.approx(0.6)
    text = selftest.render_text([fake(), wrong])
    assert "FAIL" in text and "MISS" in text and "0.1 ms" not in text


@pytest.mark.slow
def test_selftest_command_reports_every_step_time():
    done = milarun("selftest", "--seconds", "1", "--format", "json", timeout=120)
    data = json.loads(done.stdout)
    assert done.returncode == (0 if data["passed"] else 1), done.stderr  # exit = verdict
    rows = {round(m["step_ms"], 3): m for m in data["measurements"]}
    assert sorted(rows) == [0.1, 1.0, 10.0]
    for step_ms, m in rows.items():
        for key in (
            "overhead_pct",
            "error_pct",
            "true_rate",
            "measured_rate",
            "outside_pct",
            "cpu_share",
        ):
            assert isinstance(m[key], float) and math.isfinite(m[key]), (step_ms, key, m)
        assert m["true_rate"] == pytest.approx(64 / (step_ms / 1000))
        assert m["instrumented_steps"] == m["steps"]  # both loops ran the same steps
        assert m["rate_source"] in ("steady", "full-log")
        assert m["passed"] == (m["overhead_pass"] is not False and m["error_pass"] is not False)
        for kind in ("overhead", "error"):
            assert m[f"{kind}_pass"] == (
                None
                if m[f"{kind}_target"] is None
                else (abs(m["error_pct"]) if kind == "error" else m["overhead_pct"])
                <= m[f"{kind}_target"]
            )
    # The targets at 1 ms steps; 10 ms has the error target too.
    assert rows[1.0]["overhead_target"] == 0.5 and rows[1.0]["error_target"] == 0.5
    assert rows[10.0]["error_target"] == 0.5
    passed = all(m["passed"] for m in rows.values())
    assert data["passed"] is passed and done.returncode == (0 if passed else 1)
    assert bool(data["failures"]) is not passed
    for reason in data["failures"]:
        assert f"selftest FAIL: {reason}" in done.stderr


def test_selftest_rejects_bad_options():
    done = milarun("selftest", "--format", "xml")
    assert done.returncode == 1 and "--format xml" in done.stderr
    done = milarun("selftest", "--seconds", "0")
    assert done.returncode == 1 and "--seconds" in done.stderr
