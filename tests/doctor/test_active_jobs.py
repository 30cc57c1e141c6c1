"""`jobs --doctor`: the active checks before a run, their record in the run folder, and a FAIL
that stops the run (unless --force)."""

from __future__ import annotations

import json

import pytest
from test_active_gpu import fake_setup, gpus

from conftest import milarun, one_line_error
from milarun import errors
from milarun.doctor import before_jobs, record

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
    assert "PASS  cpu:0 gemm fp32" in done.stdout
    found = record.read(out / "doctor-active.json")
    assert found["verdict"] == "PASS" and set(found["measurements"]) == {"cpu:0"}
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


def test_a_bad_level_is_one_line(tmp_path):
    done = milarun("jobs", "quick", "--doctor", "thorough", "-o", tmp_path)
    assert done.returncode == 1
    assert one_line_error(done) == "milarun: error: --active thorough: use quick or full"
