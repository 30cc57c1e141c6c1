"""The real CLI in real subprocesses: the shared quick run, its results and rerun (the
other jobs runs and bad input: test_cli_jobs.py, so the two files share the workers)."""

from __future__ import annotations

import json
import os
import re

import pytest

from conftest import QUICK_RUN_SLICES, QUICK_TESTS, load_all, milarun
from milarun import results
from milarun.results import steady


def slice_threads(slices: int) -> str:
    """The torch threads an instance gets: its share of the CPUs this process may use, at
    least one (conftest.milarun clears the caller's OMP_NUM_THREADS)."""
    return str(max(1, len(os.sched_getaffinity(0)) // slices))


def test_jobs_quick_writes_one_result_per_test_and_device(quick_run):
    done, out = quick_run
    assert done.returncode == 0, done.stdout + done.stderr
    names = sorted(p.name for p in out.glob("quick.*.json"))
    for test in QUICK_TESTS:
        for device in ("0", "1"):
            matching = [n for n in names if n.startswith(f"quick.{test}.J0.{device}.")]
            assert len(matching) == 1, names
            assert ".FAIL." not in matching[0]
    # scaling (gpu-progression): one torchrun job per world size, rank 0 writes it
    for k in (1, 2):
        matching = [n for n in names if n.startswith(f"quick.scaling.{k}.J0.")]
        assert len(matching) == 1 and ".FAIL." not in matching[0], names
    assert len(names) == 2 * len(QUICK_TESTS) + 2
    # The run manifest: what was planned, every instance's result, and a complete end.
    (path,) = out.glob(".milarun-run.*.manifest")
    run = json.loads(path.read_text())
    assert run["status"] == "complete" and run["finished_at"] >= run["started_at"]
    assert run["planned"] == sorted(
        [f"quick.{t}" for t in QUICK_TESTS] + ["quick.scaling.1", "quick.scaling.2"]
    )
    assert sorted(e["result"] for e in run["ended"]) == names
    assert all(e["success"] for e in run["ended"])
    assert str(out.resolve()) in done.stdout  # says where the results are
    for test in QUICK_TESTS:
        assert f"quick.{test}" in done.stdout
    # Ends with the report (quick weights: every weighted test scored) and its HTML page.
    assert "Failure rate:" in done.stdout and "(PASS)" in done.stdout
    assert re.search(r"Score: +[0-9,.]+  \(coverage 100%\)", done.stdout), done.stdout
    pages = list(out.glob("report.*.html"))
    assert len(pages) == 1 and str(pages[0].resolve()) in done.stdout
    assert "quick.polynome" in pages[0].read_text()
    for test in QUICK_TESTS:
        for device in ("0", "1"):
            assert (out / "logs" / f"quick.{test}.J0.{device}.log").is_file()


def test_quick_results_carry_every_design_key(quick_run):
    _, out = quick_run
    for name, result in load_all(out).items():
        missing = [k for k in results.RESULT_KEYS if k not in result]
        assert not missing, (name, missing)
        assert result["success"] is True
        if result["name"].startswith("quick.scaling."):
            k = int(result["name"].rsplit(".", 1)[1])
            assert result["metrics"]["world_size"] == k
            assert sorted(t for t in result["timings"] if re.fullmatch(r"train_\d+", t)) == [
                f"train_{r}" for r in range(k)
            ]
            assert result["device"] == ",".join(f"cpu:{r}" for r in range(k))
            continue
        assert result["device"] in ("cpu:0", "cpu:1")
        assert result["environ"]["CUDA_VISIBLE_DEVICES"] == ""
        assert result["environ"]["OMP_NUM_THREADS"] == slice_threads(2)
        assert result["suite"] == "quick" and result["job"]["experiment"]
        assert result["system"]["cpu"]["count"] >= 1
        assert result["isolation"]["cpus"]
        assert result["synthetic_data"] is True or result["name"] == "quick.calibration"
        train = result["timings"]["train"]
        assert len(steady.window(train["rates"])) >= 3
        assert len(train["rates"]) >= result["call"]["arguments"]["min_slices"] == QUICK_RUN_SLICES
        assert result["timings"]["program"]["duration"] > train["duration"]
        assert re.fullmatch(r".+\.J0\.[01]\.\d{8}-\d{6}-\d{6}\.json", name)


def test_scaling_rank0_writes_one_result_with_every_rank(quick_run):
    """scaling.2: two ranks under torchrun (gloo) in one DDP group; rank 0 writes the one
    result, with each rank's timings and place."""
    _, out = quick_run
    (path,) = out.glob("quick.scaling.2.J0.*.json")
    result = json.loads(path.read_text())
    assert result["success"], result["error"]
    assert result["metrics"]["world_size"] == 2 and result["world_size"] == 2
    timings = result["timings"]
    assert {"train", "train_0", "train_1"} <= set(timings)
    assert timings["train_0"]["rates"] == timings["train"]["rates"]  # rank 0 is the writer
    # Each rank judges its own slices, yet both stopped after the same step (the stop is
    # agreed): a rank that went on alone would have hung in DDP's all-reduce.
    assert timings["train_0"]["count"] == timings["train_1"]["count"] > 0
    for rank in (0, 1):
        assert timings[f"train_{rank}"]["type"] == "rate"
        assert len(timings[f"train_{rank}"]["rates"]) >= QUICK_RUN_SLICES
    assert [(r["rank"], r["device"]) for r in result["ranks"]] == [(0, "cpu:0"), (1, "cpu:1")]
    assert {r["node"] for r in result["ranks"]} == {result["node"]}


def test_calibration_rate_is_within_one_percent_of_the_steps_own_timing(quick_run):
    """The harness's steady rate against the rate of the same steps timed by the test
    itself: a busy machine slows both alike, a wrong slice or count shows."""
    _, out = quick_run
    cal = [r for r in load_all(out).values() if r["name"] == "quick.calibration"]
    assert len(cal) == 2
    for result in cal:
        own = result["metrics"]["own_rate"]
        measured = steady.rate(result["timings"]["train"]["rates"])
        assert abs(measured / own - 1) < 0.01, (measured, own)
        assert result["metrics"]["rate_error"] == pytest.approx(measured / own - 1)


def test_rerun_reproduces_the_call_and_records_rerun_of(quick_run, tmp_path):
    _, out = quick_run
    original_path = sorted(out.glob("quick.calibration.J0.1.*.json"))[0]
    original = json.loads(original_path.read_text())
    done = milarun(
        "rerun", original_path, "-o", tmp_path, "--", "--step-time", "0.0025", "--min-slices", "4"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (new_path,) = tmp_path.glob("*.json")
    new = json.loads(new_path.read_text())
    assert new_path.name.startswith("quick.calibration.J0.1.")
    assert new["name"] == original["name"] and new["job_id"] == original["job_id"]
    assert new["call"]["function"] == original["call"]["function"]
    assert new["call"]["argv"] == original["call"]["argv"] + [
        "--step-time",
        "0.0025",
        "--min-slices",
        "4",
    ]
    assert new["call"]["arguments"]["step_time"] == 0.0025  # the new values won
    assert new["rerun_of"] == str(original_path.resolve())
    assert new["environ"]["MILARUN_DEVICE"] == original["environ"]["MILARUN_DEVICE"]
    assert new["environ"]["OMP_NUM_THREADS"] == original["environ"]["OMP_NUM_THREADS"]
    assert new["job"] == original["job"]
    assert new["metrics"]["true_rate"] == 64 / 0.0025
