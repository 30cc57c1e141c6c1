"""`rerun` of the supervisor's record of a crash (issue 50): the record holds the call the
supervisor launched, so it repeats; a record that holds no call is refused, saying so."""

from __future__ import annotations

import json

import pytest

from conftest import load_all, milarun, one_line_error
from resultfactory import result, write


@pytest.mark.slow
def test_rerun_repeats_the_call_of_a_crash_record(tmp_path):
    prof = tmp_path / "p.json"
    prof.write_text(
        json.dumps(
            {"segv": {"experiment": "faulty:crashes_unless_told", "arguments": {"--crash": True}}}
        )
    )
    out = tmp_path / "out"
    done = milarun("jobs", prof, "--devices", "cpu:1", "-o", out, "--cold-start", timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    ((name, crash),) = load_all(out).items()
    assert crash["written_by"] == "harness" and crash["failure"]["kind"] == "crash"
    assert "SIGSEGV" in crash["failure"]["message"]
    assert crash["call"]["argv"] == ["--crash"]

    again = tmp_path / "again"
    done = milarun("rerun", out / name, "-o", again, "--", "--no-crash", "--min-slices", "4")
    assert done.returncode == 0, done.stdout + done.stderr
    ((_, new),) = load_all(again).items()
    assert new["success"] and new["rerun_of"] == str((out / name).resolve())
    assert new["call"]["function"] == "faulty:crashes_unless_told"
    assert new["call"]["argv"] == ["--crash", "--no-crash", "--min-slices", "4"]
    assert (new["name"], new["job_id"]) == (crash["name"], crash["job_id"])


@pytest.mark.parametrize("call", [None, {"function": "", "argv": []}])
def test_rerun_refuses_a_record_that_holds_no_call(tmp_path, call):
    data = {**result("suite.t", "0", None), "call": call, "written_by": "harness"}
    original = write(tmp_path / "a", data, "suite.t.J0.FAIL.20260101-000000-000000.json")
    line = one_line_error(milarun("rerun", original))
    assert "holds no call to repeat" in line and str(original) in line
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [original]
