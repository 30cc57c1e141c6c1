"""One result builder: a record the test writes and one the harness writes have the same keys."""

from __future__ import annotations

import json
import os

import pytest

from conftest import load_all, milarun
from milarun import results
from milarun.results.records import ENV_PREFIXES, Call, ResultRecord


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """A real successful ``milarun run`` and a real FAIL record written by the harness."""
    out = tmp_path_factory.mktemp("records")
    done = milarun(
        "run", "milabench.models.calibration:main", "-o", out / "run", "--", "--min-slices", "5"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (written,) = load_all(out / "run").values()
    profile = out / "crash.json"
    profile.write_text(
        json.dumps({"*": {"max_duration": 30}, "crash": {"experiment": "faulty:sigill"}})
    )
    done = milarun("jobs", profile, "--devices", "cpu:1", "-o", out / "jobs", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    (harness,) = load_all(out / "jobs").values()
    return written, harness


@pytest.mark.slow
@pytest.mark.xdist_group(name="result_record")  # the records fixture, once
def test_both_writers_give_the_same_keys(records):
    written, harness = records
    assert written["success"] is True
    assert harness["success"] is False and harness["failure"]["kind"] == "crash"
    # ``written_by`` is the one marker of a harness record (absent from the test's own).
    assert harness.pop(results.WRITTEN_BY) == "harness"
    assert set(harness) == set(written)
    assert set(harness["call"]) == set(written["call"]) == {"function", "argv", "arguments"}
    assert list(written) == list(results.RECORD_KEYS)  # the legacy order, nothing extra


@pytest.mark.slow
@pytest.mark.xdist_group(name="result_record")  # the records fixture, once
def test_unknown_values_are_null_and_known_ones_are_filled(records):
    written, harness = records
    # The test's record of a plain `milarun run` has no launch; the harness's has one.
    for key in results.LAUNCH_KEYS + ("job", "signal", "log"):
        assert written[key] is None, key
    # Neither read a dataset (calibration reads none; the harness cannot know).
    assert written["dataset"] is None and harness["dataset"] is None
    assert written["synthetic_data"] is None and harness["synthetic_data"] is None
    assert harness["suite"] == "crash" and harness["repeat"] == 0
    assert harness["prepare"] == [] and harness["job"]["experiment"] == "faulty:sigill"
    assert harness["signal"] == "SIGILL" and harness["log"].endswith(".log")
    # What the harness cannot know stays empty: the test never parsed its arguments.
    assert harness["call"]["arguments"] is None and harness["metrics"] == {}
    assert written["call"]["arguments"]["min_slices"] == 5
    # calibration never loads torch, nor does the harness for it on a CPU slot (2.4 s of CPU
    # a run): no torch threads to say, the installed torch still named
    assert written["isolation"]["torch_threads"] is None and written["system"]["torch"]
    # Both keep the same subset of the environment (the instance's, for the harness).
    assert harness["environ"]["CUDA_VISIBLE_DEVICES"] == ""
    assert harness["environ"]["MILARUN_DEVICE"] == "cpu:0"
    assert all(k.startswith(ENV_PREFIXES) for k in {**harness["environ"], **written["environ"]})
    for record in (written, harness):
        assert record["system"]["cpu"]["count"] >= 1 and record["finished_at"] > 0


def test_a_launch_cannot_overwrite_a_result_field():
    with pytest.raises(ValueError, match="'success'"):
        ResultRecord(
            name="t",
            job_id="0",
            dataroot=".",
            outdir=".",
            call=Call("m:f", []),
            failure=None,
            error=None,
            device="cpu:0",
            devices=["cpu:0"],
            gpu=None,
            device_count=0,
            environ={},
            isolation=None,
            returncode=0,
            launch={"success": False},
            system={},
        )


def test_rerun_restores_the_environment_but_not_the_old_deadline(tmp_path, monkeypatch):
    """The deadline of the original job has passed: restored, it would end the rerun at
    its first slice."""
    from milarun.measure import diagnostics
    from milarun.measure.call import plan_rerun

    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # undone after the test, like the rest
    monkeypatch.delenv(diagnostics.DEADLINE_ENV, raising=False)
    original = tmp_path / "t.J0.20260101-000000-000000.json"
    original.write_text(
        json.dumps(
            {
                "name": "t",
                "job_id": "0.1",
                "success": True,
                "dataroot": str(tmp_path),
                "call": {"function": "milabench.models.calibration:main", "argv": ["--a"]},
                "environ": {"OMP_NUM_THREADS": "1", diagnostics.DEADLINE_ENV: "1.0"},
            }
        )
    )
    call = plan_rerun(original, None, ["--b"], dataroot=tmp_path / "unused")
    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert diagnostics.DEADLINE_ENV not in os.environ
    assert (call.argv, call.job_id) == (["--a", "--b"], "0.1")
    assert call.outdir.parent == tmp_path.parent  # its own folder, beside the original's
    assert call.outdir.name.startswith(f"{tmp_path.name}.rerun-")
    assert call.rerun_of == str(original.resolve()) and call.dataroot == tmp_path
