"""`jobs --doctor`: the active checks before a run, their record in the run folder, and a FAIL
that stops the run (unless --force)."""

from __future__ import annotations

import json

import pytest
from test_active_gpu import fake_setup, gpus

from conftest import milarun, one_line_error
from milarun import errors
from milarun.doctor.active import before_jobs, record
from milarun.doctor.active.run import Setup
from milarun.machine import gpu

# real `jobs` runs, seconds each: out of the fast tier (-m "not slow")
pytestmark = pytest.mark.slow

CALIBRATION = {
    "cal": {
        "experiment": "milabench.models.calibration:main",
        "arguments": {"--min-slices": 4, "--step-time": 0.005},
    }
}


def test_jobs_doctor_records_the_checks_then_runs(tmp_path):
    prof = tmp_path / "cal.json"
    prof.write_text(json.dumps(CALIBRATION))
    out = tmp_path / "out"
    done = milarun("jobs", prof, "--devices", "cpu:1", "--doctor", "quick", "-o", out)
    assert done.returncode == 0, done.stdout + done.stderr
    found = record.read(out / "doctor-active.json")
    assert "cpu:0 gemm fp32" in done.stdout
    # on a busy machine (others took a quarter of its CPU) a figure has no verdict: WARN, why
    busy = [c for c in found["checks"] if "not verdict-grade, the machine was busy" in c["detail"]]
    assert all(c["status"] in ("PASS", "INFO") or c in busy for c in found["checks"]), found
    assert found["verdict"] == ("WARN" if busy else "PASS")
    assert set(found["measurements"]) == {"cpu:0"}
    assert len(list(out.glob("cal.cal.J0.0.*.json"))) == 1  # the run's result, beside it
    report = milarun("report", out)
    assert report.returncode == 0 and "skipped" not in report.stderr


def test_a_fail_stops_the_run_and_force_runs_anyway(tmp_path):
    setup = fake_setup(gpus(3), {"1": {"gemm": 0.5}})
    with pytest.raises(
        errors.DoctorFailed, match=r"found 4 FAIL\(s\): cuda:1 gemm bf16, .*--force"
    ):
        before_jobs.check("quick", "0,1,2", tmp_path, False, print, print, setup)
    first = tmp_path / "doctor-active.json"
    assert record.read(first)["verdict"] == "FAIL"
    again = before_jobs.check("quick", "0,1,2", tmp_path, True, print, print, setup)
    assert again != first and again.name.startswith("doctor-active.")  # nothing overwritten
    assert record.read(first)["verdict"] == "FAIL"


def test_a_bad_level_or_profile_is_one_line_before_any_measure(tmp_path):
    done = milarun("jobs", "quick", "--doctor", "thorough", "-o", tmp_path)
    assert one_line_error(done) == "milarun: error: --active thorough: use quick or full"
    done = milarun("jobs", tmp_path / "none.json", "--doctor", "quick", "-o", tmp_path)
    assert "none.json" in one_line_error(done)
    assert not list(tmp_path.glob("doctor-active*"))


def test_gpus_asked_for_where_nvml_is_missing_is_one_line(tmp_path):
    checks = []
    with pytest.raises(errors.DeviceSpecError, match=r"--devices 0 names GPUs, but no NVML here"):
        before_jobs.check(
            "quick",
            "0",
            tmp_path,
            False,
            print,
            checks.append,
            Setup(backend=gpu.plain("no NVML here")),
        )
    assert not checks and not list(tmp_path.iterdir())  # nothing measured, nothing written
