"""`milarun history` and `db regressions` on a database of synthetic runs, and the history
page: one self-contained file, opened in a real headless Chromium."""

from __future__ import annotations

import re

import pytest
from matplotlib import image

from conftest import DATA, milarun
from milarun.cli.history import parse_since
from milarun.errors import UsageError
from milarun.history import ingest, machines, page, store, trends
from milarun.history import render as history_render
from pages import TableReader, chromium, figures, needs_chromium, number_problems, show
from resultfactory import run_folder

DAY = 86_400.0
T0 = 1_767_225_600.0  # 2026-01-01
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """Five daily runs of two tests on one machine, quick.b 20% slower on the last two;
    one run on another machine, quick.a half as fast there."""
    top = tmp_path_factory.mktemp("history")
    url = f"sqlite:///{top / 'history.sqlite'}"
    engine = store.open_db(url)
    for day, b in enumerate([100.0, 100.0, 101.0, 80.0, 79.0]):
        folder = run_folder(top / f"day{day}", {"quick.a": [50.0], "quick.b": [b]}, T0 + day * DAY)
        ingest.ingest(engine, ingest.read_run(folder, machine=HOSTILE))
    other = run_folder(top / "other", {"quick.a": [25.0, 25.0], "quick.b": [100.0]}, T0 + 9 * DAY)
    ingest.ingest(engine, ingest.read_run(other, machine="other"))
    engine.dispose()
    return url


def judged(url: str, filters: trends.Filters) -> dict[str, list[trends.Point]]:
    engine = store.open_db(url)
    with store.session(engine) as session:
        series = trends.history(session, filters, trends.Options())
    engine.dispose()
    return series


def test_history_text_and_the_regressions_command(database):
    since = parse_since("2026-01-02")
    shown = history_render.history_text(
        judged(database, trends.Filters("quick.b", HOSTILE, since=since))
    )
    lines = shown.splitlines()
    assert lines[0] == f"quick.b @ {HOSTILE}" and len(lines) == 2 + 4 + 2  # day 0 left out
    assert lines[2].endswith("Insufficient data") and lines[3].endswith("No change")
    assert "-20.3%" in lines[4] and "Suspicious" in lines[4]
    assert "-21.3%" in lines[5] and "Regression" in lines[5]
    late = judged(database, trends.Filters(since=parse_since("2026-01-04")))
    found = trends.alerts(late, (trends.REGRESSION, trends.SUSPICIOUS))
    assert [(p.verdict, p.series) for p in found] == [
        (trends.REGRESSION, f"quick.b @ {HOSTILE}"),
        (trends.SUSPICIOUS, f"quick.b @ {HOSTILE}"),
    ]
    failing = milarun("db", "regressions", "--db", database, "--fail-on", "regression")
    assert failing.returncode == 3, failing.stderr
    assert failing.stdout.startswith("Regression: quick.b @ ") and failing.stdout.count("\n") == 1


def page_of(url: str) -> str:
    return page.page_html(judged(url, trends.Filters()), trends.Filters(), trends.Options())


def test_the_page_is_self_contained_and_escaped(database, tmp_path):
    html = page_of(database)
    assert "<script" not in html and "&lt;script&gt;" in html
    assert not re.search(r"(src|href)=\"?(https?:)?//", html)  # nothing from the network
    assert len(figures(html)) == 4 and all(f["svgs"] == 1 for f in figures(html))
    assert not number_problems(html), number_problems(html)
    path = page.write_page(tmp_path / "h.html", {}, trends.Filters(), trends.Options())
    assert "No results in the database match" in path.read_text()


@needs_chromium
def test_the_page_renders_in_chromium(database, tmp_path):
    path = tmp_path / "history.html"
    path.write_text(page_of(database))
    dom = chromium("--dump-dom", path.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    alerts = table_rows_of(dom.stdout, "alerts")
    assert [(a["verdict"], a["series"]) for a in alerts] == [
        ("Regression", f"quick.b @ {HOSTILE}"),
        ("Suspicious", f"quick.b @ {HOSTILE}"),
    ]
    assert alerts[0]["change"] == "-21.3%" and alerts[1]["change"] == "-20.3%"
    points = table_rows_of(dom.stdout, "series-2")  # quick.a x 2 machines first
    assert [p["verdict"] for p in points][-2:] == ["Suspicious", "Regression"]
    shot = tmp_path / "shot.png"
    done = chromium("--window-size=1280,1200", f"--screenshot={shot}", path.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    pixels = image.imread(shot)[..., :3]
    assert (pixels < 0.95).any(axis=-1).mean() > 0.02, "the page looks blank"


def table_rows_of(html: str, table_id: str) -> list[dict[str, str]]:
    reader = TableReader(table_id)
    reader.feed(html)
    header, *rows = reader.rows
    return [dict(zip(header, row)) for row in rows]


def test_machines_side_by_side(database):
    shown = milarun("report", "--db", database, "--machines", HOSTILE, "other")
    assert shown.returncode == 0, shown.stderr
    lines = {ln.split()[0]: ln for ln in shown.stdout.splitlines() if ln.startswith("quick.")}
    assert "x0.50" in lines["quick.a"] and "n=2" in lines["quick.a"]
    assert "x1.27" in lines["quick.b"]
    engine = store.open_db(database)
    with store.session(engine) as session:
        by_run = machines.side_by_side(session, ["run:1", "run:6"], None)
        assert [c.label for c in by_run.columns] == [f"{HOSTILE} (run 1)", "other (run 6)"]
        with pytest.raises(UsageError, match="no such machine.*other"):
            machines.side_by_side(session, ["nosuch"], None)
    engine.dispose()


H100 = DATA / "gpu-runs" / "h100-2026-11-28"


@pytest.fixture(scope="module")
def h100_page(tmp_path_factory):
    """The history of the real H100 runs: a point per test, two for diffusion and llm."""
    top = tmp_path_factory.mktemp("h100-history")
    db = top / "h.sqlite"
    folders = [H100 / "modern", H100 / "modern-diffusion-default", H100 / "modern-llm-compile"]
    done = milarun("db", "ingest", *folders, "--db", db)
    assert done.returncode == 0, done.stderr
    path = top / "history.html"
    done = milarun("history", "--db", db, "--html", path)
    assert done.returncode == 0, done.stderr
    return path


def test_the_time_axis_spans_the_points(h100_page):
    """One run's tests, each a dot: the axis is the day around it, not four years."""
    charts = figures(h100_page.read_text())
    assert len(charts) == 7
    for chart in charts:
        years = set(re.findall(r"\b(20\d\d)\b", chart["svg_text"]))
        assert years == {"2026"}, (years, chart["svg_text"][:300])
        assert "Nov-28" in chart["svg_text"]


def test_the_page_numbers_have_thousands_separators(h100_page):
    page = h100_page.read_text()
    assert not number_problems(page), number_problems(page)
    assert "50,000" in page  # the llm's axis


@needs_chromium
def test_the_h100_page_fits_1400_px(h100_page, tmp_path):
    shown = show(h100_page, tmp_path, 1400, 1600)
    assert not shown.too_wide(), shown.too_wide()
    assert not shown.blank(), shown.blank()
