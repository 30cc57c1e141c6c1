"""Commands that only read the results database never make one (issue 39, item 8)."""

from __future__ import annotations

import pytest

from conftest import milarun, one_line_error


@pytest.mark.parametrize(
    "command", [["history"], ["db", "regressions"], ["report", "--machines", "m1"]]
)
def test_a_reading_command_on_a_missing_database_makes_nothing(tmp_path, command):
    db = tmp_path / "typo" / "dir" / "h.sqlite"
    done = milarun(*command, "--db", db)
    line = one_line_error(done)
    assert done.returncode != 0 and "no such database" in line and str(db) in line
    assert "db ingest" in line
    assert not (tmp_path / "typo").exists()


def test_ingest_says_which_database(tmp_path):
    db = tmp_path / "h.sqlite"
    done = milarun("db", "ingest", tmp_path / "nothing-here", "--db", db)
    assert f"database: sqlite:///{db}" in done.stdout
