"""Issue 49: a name that matches nothing says so, with the names it may have meant, and
exits non-zero (`history quick.polynom` answered "no results in the database match", exit 0)."""

from __future__ import annotations

import pytest

from conftest import milarun
from milarun.errors import ProfileError
from milarun.run.profile import load_profile
from resultfactory import result, write


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    root = tmp_path_factory.mktemp("names")
    run = root / "run"
    for test in ("quick.polynome", "quick.sine_wave"):
        for job in ("0.0", "0.1"):
            write(run, result(test, job, 100.0))
    url = root / "history.sqlite"
    done = milarun("db", "ingest", run, "--db", url, "--machine", "box-a")
    assert done.returncode == 0, done.stderr
    return url


def test_a_typo_in_a_test_name_is_told_the_names(db):
    done = milarun("history", "quick.polynom", "--db", db)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "no test named 'quick.polynom'; did you mean quick.polynome?" in done.stderr
    assert "(tests: quick.polynome, quick.sine_wave)" in done.stderr


def test_a_typo_in_a_machine_name_is_told_the_names(db):
    done = milarun("history", "quick.polynome", "--machine", "box-b", "--db", db)
    assert done.returncode == 1 and "did you mean box-a?" in done.stderr, done.stderr
    done = milarun("report", "--db", db, "--machines", "box-b")
    assert done.returncode == 1 and "did you mean box-a?" in done.stderr, done.stderr


def test_nothing_matches_is_a_non_zero_exit(db):
    done = milarun("history", "quick.polynome", "--since", "2999-01-01", "--db", db)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no results in the database match" in done.stdout
    shown = milarun("history", "quick.polynome", "--db", db)
    assert shown.returncode == 0 and "quick.polynome @ box-a" in shown.stdout, shown.stdout


def test_a_typo_in_jobs_name_is_told_the_closest():
    with pytest.raises(ProfileError, match="no job named polynom; did you mean polynome?"):
        load_profile("quick").select(["polynom"])
