"""Every job's arguments are checked before anything runs (milarun.run.arguments and
milarun.measure.argcheck): a bad value stops the run up front, a flag a test lacks is left
out for that test only."""

from __future__ import annotations

import pytest

from conftest import milarun, one_line_error
from milarun import errors
from milarun.measure.argcheck import flag_groups
from milarun.run import arguments
from milarun.run.profile import load_profile


def test_flag_groups_keep_each_flag_with_its_values():
    assert flag_groups(["--a", "1", "--b", "--c", "x", "y", "--d", "-2"]) == [
        ["--a", "1"],
        ["--b"],
        ["--c", "x", "y"],
        ["--d", "-2"],
    ]
    assert flag_groups(["positional", "--a"]) == [["positional"], ["--a"]]
    assert flag_groups([]) == []


def jobs(*names: str) -> list:
    return load_profile("quick").select(list(names), [])


def test_a_flag_a_test_lacks_is_left_out_for_that_test_only(caplog):
    found = arguments.check_arguments(jobs("cart", "polynome"), ["--batch-size", "64"])
    assert found == {"quick.cart": [], "quick.polynome": ["--batch-size", "64"]}
    assert "quick.cart (--batch-size 64)" in caplog.text


def test_a_bad_value_names_the_job_and_the_flag():
    with pytest.raises(errors.UsageError) as info:
        arguments.check_arguments(jobs("cart", "polynome"), ["--batch-size", "abc"])
    message = str(info.value)
    assert message.startswith("job quick.polynome: bad test argument: argument --batch-size")
    assert message.endswith("nothing was run")


def test_jobs_with_a_bad_argument_runs_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    done = milarun(
        "jobs", "quick", "--name", "polynome", "calibration", "-o", out, "--", "--batch-size", "0"
    )
    line = one_line_error(done)
    assert "--batch-size" in line and "nothing was run" in line and "job quick." in line
    assert not out.exists()  # not even the folder: the check comes first


def test_harness_flags_on_a_shipped_profile_are_checked_without_a_test(monkeypatch):
    """Every test takes --min-slices and the like: a shipped profile's jobs need no import
    to check them (the child process is never started)."""
    monkeypatch.setattr(arguments.subprocess, "run", None)  # would fail if called
    assert arguments.check_arguments(jobs("cart"), ["--min-slices", "6"], shipped=True) == {}
    with pytest.raises(errors.UsageError) as info:
        arguments.check_arguments(jobs("cart"), ["--min-slices", "abc"], shipped=True)
    assert "--min-slices" in str(info.value) and "nothing was run" in str(info.value)
