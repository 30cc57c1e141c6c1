"""`milarun jobs` through the real CLI in real subprocesses: the shared quick run (conftest's
quick_run), its results and rerun; then jobs runs of their own, failures and bad input."""

from __future__ import annotations

import json
import os
import re

import pytest

from conftest import QUICK_RUN_SLICES, QUICK_TESTS, load_all, milarun, one_line_error
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
    assert [r["cuda_devices"] for r in result["ranks"]] == [None, None]  # CPU ranks


def test_calibration_rate_lies_between_the_steps_own_timings(quick_run):
    """The harness's steady rate against the same steps timed by the test itself: a busy
    machine slows both alike, a wrong slice or count shows. A harness block holds the spin
    and part of the harness's bookkeeping, so its rate lies between the spins' rate and the
    whole steps' rate (0.2-0.8% apart on a loaded 2-core VM), 1% either side."""
    _, out = quick_run
    cal = [r for r in load_all(out).values() if r["name"] == "quick.calibration"]
    assert len(cal) == 2
    for result in cal:
        metrics = result["metrics"]
        measured = steady.rate(result["timings"]["train"]["rates"])
        assert metrics["own_step_rate"] <= metrics["own_rate"]
        assert 0.99 * metrics["own_step_rate"] <= measured <= 1.01 * metrics["own_rate"], (
            measured,
            metrics,
        )
        assert metrics["rate_error"] == pytest.approx(measured / metrics["own_rate"] - 1)


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


# -- jobs runs of their own ----------------------------------------------------------------
def test_unknown_name_lists_the_valid_ones(tmp_path):
    done = milarun("jobs", "quick", "--name", "nope", "-o", tmp_path)
    assert done.returncode == 1
    line = one_line_error(done)
    assert "nope" in line
    for test in QUICK_TESTS:
        assert test in line
    assert not list(tmp_path.glob("*.json"))


def test_failing_test_writes_a_fail_result_and_exits_nonzero(tmp_path):
    done = milarun("run", "faulty:raises", "-o", tmp_path, "--experiment-name", "bad")
    assert done.returncode == 1
    (path,) = tmp_path.glob("*.json")
    assert re.fullmatch(r"bad\.J0\.FAIL\.\d{8}-\d{6}-\d{6}\.json", path.name)
    result = json.loads(path.read_text())
    assert result["success"] is False
    assert result["failure"]["kind"] == "exception"
    assert "deliberate failure" in result["failure"]["message"]
    assert "Traceback" in result["error"]
    assert result["returncode"] == 1


@pytest.mark.parametrize(
    "function, kind",
    [
        ("faulty:nan_metric", "nan"),
        ("faulty:inf_metric", "nan"),  # a diverged loss is not a success either
        ("faulty:too_short", "too-short"),
    ],
)
def test_bad_measurements_are_failures(tmp_path, function, kind):
    # the bad metric is judged on a result, however short: 2 slices of 0.5 s, not 6
    done = milarun("run", function, "-o", tmp_path, "--", "--min-slices", "2")
    assert done.returncode == 1
    (path,) = tmp_path.glob("*.FAIL.*.json")
    assert json.loads(path.read_text())["failure"]["kind"] == kind


@pytest.mark.slow
def test_a_zero_rate_is_a_failure_in_the_record_and_the_report(tmp_path):
    """A test that counts no example measured nothing: `run` says FAIL and exits 1 (it
    printed a traceback), the record says so, and the report counts what the record says."""
    done = milarun("run", "faulty:zero_rate", "-o", tmp_path / "out")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "FAIL (no-rate)" in done.stdout
    (path,) = (tmp_path / "out").glob("*.json")
    record = json.loads(path.read_text())
    assert ".FAIL." in path.name and record["success"] is False
    assert record["failure"]["kind"] == "no-rate" and "0 examples/s" in record["failure"]["message"]
    report = milarun("report", tmp_path / "out", "--format", "json")
    assert json.loads(report.stdout)["scores"]["failure_kinds"] == {"no-rate": 1}


def write_profile(path, **jobs):
    path.write_text(json.dumps({"*": {"max_duration": 3}, **jobs}))
    return path


@pytest.mark.slow
def test_crashes_and_timeouts_get_harness_fail_records(tmp_path):
    prof = write_profile(
        tmp_path / "faults.json",
        # The crash ends itself at once: a loaded machine's start-up must not time it out.
        crash={"experiment": "faulty:sigill", "max_duration": 120},
        slow={"experiment": "faulty:sleepy"},
        stuck={"experiment": "faulty:hang"},
    )
    out = tmp_path / "out"
    done = milarun("jobs", prof, "--devices", "cpu:1", "-o", out, timeout=240)
    assert done.returncode == 1
    found = {r["name"]: r for r in load_all(out).values()}
    assert found["faults.crash"]["failure"]["kind"] == "crash"
    assert "SIGILL" in found["faults.crash"]["failure"]["message"]
    assert found["faults.crash"]["written_by"] == "harness"
    # sleepy turns the harness's SIGALRM into a timeout result of its own
    assert found["faults.slow"]["failure"]["kind"] == "timeout"
    assert "written_by" not in found["faults.slow"]
    # hang ignores it and is killed after the grace period; the harness writes the record
    assert found["faults.stuck"]["failure"]["kind"] == "timeout"
    assert found["faults.stuck"]["written_by"] == "harness"
    assert found["faults.stuck"]["signal"] == "SIGKILL"
    for result in found.values():
        assert all(k in result for k in results.RESULT_KEYS)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["jobs", "quick", "--repeat", "abc"], "--repeat"),
        (["jobs", "quick", "--repeat", "0"], "--repeat"),
        (["jobs", "quick", "--devices", "gpu:x"], "gpu:x"),
        (["jobs", "missing-profile"], "missing-profile"),
        (["run", "no.such.module:main"], "no.such.module"),
        (["run", "milabench.models.polynome:nope"], "nope"),
        (["run", "polynome"], "MODULE:FUNCTION"),
        (["run", "milabench.models.polynome:main", "--extra", "{bad"], "--extra"),
        (["rerun", "/nonexistent/result.json"], "/nonexistent/result.json"),
    ],
)
def test_bad_input_gets_one_line(tmp_path, args, fragment):
    done = milarun(*args, "-o", tmp_path / "out")
    assert done.returncode != 0
    assert fragment in one_line_error(done)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.json"))


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = milarun("jobs", "quick", "-o", blocker / "sub")
    assert done.returncode == 1
    line = one_line_error(done)
    assert str(blocker / "sub") in line and "-o" in line


def test_cgroup_profile_refuses_to_run_unisolated(tmp_path):
    prof = write_profile(
        tmp_path / "iso.json",
        t={
            "experiment": "milabench.models.polynome:main",
            "partition_scheme": {
                "type": "per-gpu",
                "cgroup": "cpuset,memory:student{CUDA_VISIBLE_DEVICES}",
            },
        },
    )
    done = milarun("jobs", prof, "-o", tmp_path / "out")
    assert done.returncode == 1
    assert "--no-cgexec" in one_line_error(done)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.json"))


def test_gpu_instance_without_a_gpu_fails_instead_of_using_the_cpu(tmp_path):
    done = milarun(
        "run",
        "milabench.models.polynome:main",
        "-o",
        tmp_path,
        env={"CUDA_VISIBLE_DEVICES": "0", "MILARUN_DEVICE": "cuda"},
    )
    assert done.returncode == 1
    (path,) = tmp_path.glob("*.FAIL.*.json")
    result = json.loads(path.read_text())
    assert "torch sees no GPU" in result["failure"]["message"]


@pytest.mark.slow
def test_ctrl_c_stops_every_instance_and_records_them(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from conftest import ROOT, cli_env

    prof = write_profile(
        tmp_path / "long.json", wait={"experiment": "faulty:sleepy", "max_duration": 120}
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "milarun", "jobs", str(prof), "--devices", "cpu:2", "-o", str(out)],
        cwd=ROOT,
        env=cli_env(keep_omp=True),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    children = []
    while time.time() < deadline and len(children) < 2:
        children = psutil.Process(proc.pid).children(recursive=True)
        time.sleep(0.2)
    assert len(children) >= 2
    time.sleep(3)  # let the tests start their loops
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    time.sleep(0.5)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    found = load_all(out)
    assert len(found) == 2
    for name, result in found.items():
        assert ".FAIL." in name
        assert result["failure"]["kind"] == "interrupted"


@pytest.mark.slow
def test_repeat_adds_a_round_and_a_failing_prepare_warns_once_and_is_recorded(tmp_path):
    prof = write_profile(
        tmp_path / "prep.json",
        cal={
            "experiment": "milabench.models.calibration:main",
            "arguments": {"--min-slices": 4, "--step-time": 0.001},
            "prepare": ["echo needs root >&2; exit 1"],
            "max_duration": 60,
        },
    )
    out = tmp_path / "out"
    done = milarun("jobs", prof, "--repeat", "2", "-o", out, "--devices", "cpu:2")
    assert done.returncode == 0, done.stdout + done.stderr
    names = sorted(p.name.split(".2026")[0][:30] for p in out.glob("*.json"))
    ids = sorted(results.parse_filename(p.name)["job_id"] for p in out.glob("*.json"))
    assert ids == ["0.0", "0.1", "1.0", "1.1"], names  # <repeat>.<device>
    assert done.stderr.count("milarun: warning: prepare command") == 1  # through logging
    runs = load_all(out).values()
    assert len(runs) == 4
    for result in runs:
        assert result["prepare"] == [{"command": "echo needs root >&2; exit 1", "returncode": 1}]


@pytest.mark.slow
def test_one_killed_instance_leaves_a_record_and_its_sibling_succeeds(tmp_path):
    prof = write_profile(
        tmp_path / "kill.json", k={"experiment": "faulty:killed_on_first_slice", "max_duration": 60}
    )
    done = milarun("jobs", prof, "--devices", "cpu:2", "-o", tmp_path / "out")
    assert done.returncode == 1
    found = {r["device"]: r for r in load_all(tmp_path / "out").values()}
    assert found["cpu:0"]["failure"]["kind"] == "killed"
    assert found["cpu:0"]["signal"] == "SIGKILL" and found["cpu:0"]["returncode"] == -9
    assert found["cpu:1"]["success"] is True


def test_extra_that_would_overwrite_a_harness_field_is_refused_before_running(tmp_path):
    done = milarun("run", "faulty:raises", "-o", tmp_path / "out", "--extra", '{"success": true}')
    assert done.returncode == 1
    assert "--extra key 'success'" in one_line_error(done)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.json"))


@pytest.mark.slow
def test_jobs_scores_only_what_could_run(tmp_path):
    """On one device a gpu-progression job makes only scaling.1: scaling.2 is not missing."""
    done = milarun(
        "jobs",
        "quick",
        "--name",
        "scaling",
        "--devices",
        "cpu:1",
        "-o",
        tmp_path,
        "--",
        "--min-slices",
        "5",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"Score: +[0-9,.]+  \(coverage 100%\)", done.stdout), done.stdout
    assert "Missing" not in done.stdout


def test_more_cpu_slices_than_cpus_are_refused_before_anything_starts(tmp_path):
    out = tmp_path / "out"
    done = milarun("jobs", "quick", "--name", "polynome", "--devices", "cpu:99", "-o", out)
    line = one_line_error(done)
    assert done.returncode != 0 and "cpu:99" in line and "--oversubscribe" in line
    assert not out.exists()  # no folder, no manifest, no instance


def test_oversubscribe_runs_them_with_a_warning(caplog):
    from milarun import errors
    from milarun.machine.devices import parse_device_spec
    from milarun.run import suite

    many = parse_device_spec(f"cpu:{len(os.sched_getaffinity(0)) + 1}")
    with pytest.raises(errors.UsageError):
        suite.check_cpu_slices(many, oversubscribe=False)
    suite.check_cpu_slices(many, oversubscribe=True)
    assert "share them" in caplog.text and "--oversubscribe" in caplog.text
    suite.check_cpu_slices(parse_device_spec("cpu:1"), oversubscribe=False)
