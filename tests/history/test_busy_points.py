"""Issue 39 on a database of synthetic runs: points measured on a busy machine are stored
with their busy flag, shown as Busy with their change, never a Regression, and `db
regressions --fail-on regression` does not exit 3 for them: it says how many it left out."""

from __future__ import annotations

import pytest

from conftest import milarun
from milarun.history import page, store, trends
from resultfactory import run_folder

DAY = 86_400.0
T0 = 1_767_225_600.0  # 2026-01-01


def busy_diagnostics(others: float) -> dict:
    contention = {"others": others, "cpus": 1, "load": 3.0, "span": 9.0}
    return {"train": {"slices": 18, "cv": 0.01, "flags": ["busy"], "contention": contention}}


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """Four quiet daily runs of quick.a at 100/s, then two on a busy machine at 60/s (made
    once: the tests only read it)."""
    tmp_path = tmp_path_factory.mktemp("busy-history")
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    for day, rate in enumerate([100.0, 101.0, 99.0, 100.0, 60.0, 59.0]):
        extra = {"diagnostics": busy_diagnostics(0.7)} if day >= 4 else {}
        folder = run_folder(tmp_path / f"day{day}", {"quick.a": [rate]}, T0 + day * DAY, **extra)
        done = milarun("db", "ingest", folder, "--db", url)
        assert done.returncode == 0, done.stderr
    return url


def test_busy_points_are_shown_never_judged_and_no_alert(database):
    shown = milarun("history", "--db", database)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    busy = [line for line in lines if "  Busy  " in line]
    assert len(busy) == 2 and all("-40" in line or "-41" in line for line in busy), shown.stdout
    assert all("machine busy in 1 of 1 instance(s): not judged" in line for line in busy)
    assert "Regression" not in shown.stdout and "Suspicious" not in shown.stdout
    alerts = milarun("db", "regressions", "--db", database, "--fail-on", "regression")
    assert alerts.returncode == 0, alerts.stdout + alerts.stderr
    assert alerts.stdout == (
        "no alert\nleft out: 2 point(s) measured on a busy machine, 2 of them slower than "
        "their history by the threshold: not judged (`milarun history`)\n"
    )
    suspicious = milarun("db", "regressions", "--db", database, "--fail-on", "suspicious")
    assert suspicious.returncode == 0, suspicious.stdout


def test_the_history_page_shows_busy_points(database):
    engine = store.open_db(database)
    with store.session(engine) as session:
        series = trends.history(session, trends.Filters(), trends.Options())
    engine.dispose()
    html = page.page_html(series, trends.Filters(), trends.Options())
    assert html.count(">Busy<") >= 2
