"""Node energy (a BMC, issue 51) in the results database: ingested with the result, read back
as each point's node examples per joule, shown by `milarun history` and its page beside the
rate."""

from __future__ import annotations

from conftest import milarun
from milarun.history import ingest, page, store, trends
from milarun.history import render as history_render
from pages import TableReader
from resultfactory import run_folder

DAY = 86_400.0
T0 = 1_767_225_600.0  # 2026-01-01


def node_energy(per_joule: float) -> dict:
    return {
        "joules": 18_000.0,
        "seconds": 9.0,
        "watts": 2000.0,
        "instances": 1,
        "share_joules": 18_000.0,
        "gpu_joules": None,
        "rest_joules": None,
        "examples": per_joule * 18_000.0,
        "examples_per_joule": per_joule,
        "method": "counter",
        "readings": 9,
        "source": "redfish /redfish/v1/Chassis/1 EnvironmentMetrics",
        "reason": None,
    }


def test_history_shows_node_examples_per_joule(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    extras = [{"node_energy": node_energy(0.05)}, {"node_energy": node_energy(0.04)}, {}]
    for day, extra in enumerate(extras):
        folder = run_folder(tmp_path / f"day{day}", {"quick.a": [100.0]}, T0 + day * DAY, **extra)
        done = milarun("db", "ingest", folder, "--db", url)
        assert done.returncode == 0, done.stderr
    shown = milarun("history", "--db", url)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "node ex/J" in lines[1], shown.stdout
    column = lines[1].index("node ex/J") + len("node ex/J")
    rows = [line for line in lines if line.startswith("2026-01-0")]
    cells = [row[column - 9 : column].strip() for row in rows]
    assert cells == ["0.05", "0.04", "-"]  # no BMC the third day


def test_a_series_without_node_energy_keeps_its_columns(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    folder = run_folder(tmp_path / "day0", {"quick.a": [100.0]}, T0)
    assert milarun("db", "ingest", folder, "--db", url).returncode == 0
    shown = milarun("history", "--db", url)
    assert shown.returncode == 0 and "node ex/J" not in shown.stdout


def test_the_history_page_shows_node_examples_per_joule_where_points_have_it(tmp_path):
    """quick.a measured by a BMC on two of three days: its table has the node ex/J column
    ("-" the day without); quick.b never: its table has none."""
    engine = store.open_db(f"sqlite:///{tmp_path / 'history.sqlite'}")
    extras = [{"node_energy": node_energy(0.05)}, {"node_energy": node_energy(0.04)}, {}]
    for day, extra in enumerate(extras):
        folder = run_folder(tmp_path / f"a{day}", {"quick.a": [100.0]}, T0 + day * DAY, **extra)
        ingest.ingest(engine, ingest.read_run(folder, machine="m"))
        plain = run_folder(tmp_path / f"b{day}", {"quick.b": [50.0]}, T0 + day * DAY + 600)
        ingest.ingest(engine, ingest.read_run(plain, machine="m"))
    with store.session(engine) as session:
        series = trends.history(session, trends.Filters(), trends.Options())
    engine.dispose()
    html = page.page_html(series, trends.Filters(), trends.Options())
    tables = {}
    for index, name in enumerate(series):
        reader = TableReader(f"series-{index}")
        reader.feed(html)
        tables[name.split(" @ ")[0]] = reader.rows
    header, *rows = tables["quick.a"]
    column = header.index(history_render.NODE_COLUMN)
    assert [row[column] for row in rows] == ["0.05", "0.04", "-"]
    assert all(len(row) == len(header) for row in rows)
    header, *rows = tables["quick.b"]
    assert history_render.NODE_COLUMN not in header and len(rows) == 3
    assert all(len(row) == len(header) for row in rows)
