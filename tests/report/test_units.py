"""Legacy units and the natural ones beside them: toy_lstm counts as the legacy test did,
the summary carries the natural unit per test, the report shows the natural rate."""

from __future__ import annotations

import json

import pytest

from conftest import milarun
from milarun.report import units
from milarun.results.read import views
from modelrun import assert_rejected, run_trained
from resultfactory import result, write

SINE_ARGS = ["--seq-len", "50", "--min-slices", "6"]


@pytest.mark.slow
def test_sine_wave_counts_every_sample_and_trains_on_all_but_3(tmp_path):
    """The legacy toy_lstm: `it.set_count(samples)` per step while training on samples - 3;
    --batch-size is the waves trained on (--samples minus the 3 held out)."""
    samples = 10
    res = run_trained("sine_wave", None, tmp_path, ["--batch-size", "7"] + SINE_ARGS)
    train = res["timings"]["train"]
    assert train["blocks"] > 0 and train["count"] == samples * train["blocks"]
    assert res["metrics"]["per_example.sequences"] == pytest.approx((samples - 3) / samples)


def test_sine_wave_needs_more_samples_than_held_out():
    assert_rejected("sine_wave", ["--samples", "3"], "--samples 3")


def test_natural_entry_comes_from_the_successful_runs():
    runs = [
        {"metrics": {"loss": 0.1, "per_example.agent_steps": 128.0}},
        {"metrics": {"loss": 0.2, "per_example.agent_steps": 128}},
    ]
    assert units.natural(views(runs)) == {"unit": "agent_steps", "per_example": 128.0}
    assert units.natural(views([{"metrics": {"loss": 0.1}}, {"metrics": None}])) is None
    assert units.natural(views([{"metrics": {"per_example.x": float("nan")}}])) is None


def test_summary_and_html_carry_the_natural_unit(tmp_path):
    res = tmp_path / "res"
    for i, rate in enumerate([10.0, 12.0]):
        write(
            res,
            result(
                "suite.atari",
                f"0.{i}",
                rate,
                metrics={"loss": 0.5, "per_example.agent_steps": 128.0},
            ),
        )
    write(
        res,
        result(
            "suite.atari",
            "0.2",
            None,
            failure={"kind": "crash", "message": "x"},
            metrics={"per_example.agent_steps": 64.0},
        ),
    )  # failed: not counted
    write(res, result("suite.vae", "0.0", 50.0))
    out = tmp_path / "summary.json"
    assert milarun("summary", res, "-o", out).returncode == 0
    summ = json.loads(out.read_text())
    assert summ["suite.atari"]["natural"] == {"unit": "agent_steps", "per_example": 128.0}
    assert "natural" not in summ["suite.vae"]
    # A report made from the summary file shows it too, and so does the HTML page.
    page = tmp_path / "r.html"
    done = milarun("report", out, "--html", page)
    assert done.returncode == 0, done.stderr
    assert "Natural units" in done.stdout and "1,408.00" in done.stdout  # 11 x 128
    html = page.read_text()
    assert 'id="natural"' in html and "1,408.00" in html and "agent_steps" in html
