"""The HTML report, opened in a real headless Chromium."""

from __future__ import annotations

import json
import re

import pytest

from conftest import milarun
from pages import TableReader, figures, needs_chromium, show, table_rows
from resultfactory import SYSTEM, result, write

HOSTILE = "<script>alert(1)</script>"
# The system record as `milarun run` writes it: GPUs as records, versions a process without
# ROCm leaves as None.
PAGE_SYSTEM = {
    **SYSTEM,
    "cpu": {"model": "Test CPU", "count": 16, "physical": 8},
    "hip": None,
    "cudnn": 90100,
    "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920.0} for i in range(8)],
}


# Every test here on one worker, in a row: the page below is made once.
pytestmark = pytest.mark.xdist_group(name="html_page")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("html")
    res = root / "results"
    drifted = {
        "train": {"slices": 24, "cv": 0.01, "drift": 0.05, "warmup": 1.0, "flags": ["drift"]}
    }
    common = {"system": PAGE_SYSTEM, "suite": "suite"}
    for i, rate in enumerate([100.0, 104.0, 97.0, 101.0]):
        write(
            res,
            result(
                "suite.alpha",
                f"{i // 2}.{i % 2}",
                rate,
                device=f"cuda:{i % 2}",
                diagnostics=drifted,
                **common,
            ),
        )
    write(res, result(HOSTILE, "0.0", 20.0, **common), "hostile.J0.0.20260101-000000-000000.json")
    # A test that sets its own torch threads (as cart does) on cuda:1: still one row for it.
    own_threads = result(HOSTILE, "0.1", 21.0, device="cuda:1", **common)
    own_threads["isolation"]["torch_threads"] = 1
    write(res, own_threads, "hostile.J0.1.20260101-000000-000000.json")
    write(
        res,
        result(
            "suite.beta",
            "0.0",
            None,
            failure={"kind": "crash", "message": "killed by SIGILL"},
            error="Traceback (most recent call last)\n  <b>bold</b>\nIllegal instruction",
            **common,
        ),
    )
    weights = root / "w.json"
    weights.write_text(json.dumps({"suite.alpha": 4, HOSTILE: 4, "suite.beta": 4}))
    path = root / "report.html"
    done = milarun(
        "report",
        res,
        "--weights",
        weights,
        "--compare",
        res,
        "--compare-gpus",
        "--price",
        "1000",
        "--html",
        path,
        "--title",
        "Tender <A&B>",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    return path, json.loads(done.stdout)


def test_page_is_self_contained_and_escaped(page):
    text = page[0].read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<script" not in text  # no script at all: nothing to escape from
    assert "Tender &lt;A&amp;B&gt;" in text
    # Works offline: nothing loaded from elsewhere (SVG namespaces are names, not fetches).
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)
    assert "<link" not in text and "@import" not in text
    assert text.count("<svg") == 3  # the overview, and one chart per test with a series
    assert "killed by SIGILL" in text and "&lt;b&gt;bold&lt;/b&gt;" in text
    assert "Isolation each instance got" in text and "/student1" in text


def test_header_says_when_where_on_what_and_which_suite(page):
    rows = TableReader("about")
    rows.feed(page[0].read_text())
    about = dict(rows.rows)
    # finished_at 2026-01-01 00:00 UTC, each run 30 s of program
    assert about["date"] == "2025-12-31 23:59 to 2026-01-01 00:00 UTC"
    assert about["host"] == "node1"
    assert about["devices"] == "cpu:0, cuda:0-1 (NVIDIA A100-SXM4-80GB, 80 GiB)"
    assert about["suite"] == "suite"
    assert about["runs"] == "7 run(s) of 3 test(s), 1 failed"


def test_system_is_a_table_in_words(page):
    rows = TableReader("system")
    rows.feed(page[0].read_text())
    system = dict(rows.rows)
    assert system["CPU"] == "Test CPU, 16 logical CPUs (8 physical cores)"
    assert system["GPUs"] == "8 x NVIDIA A100-SXM4-80GB, 80 GiB"
    assert system["cuDNN"] == "9.1.0" and system["RAM"] == "64.0 GiB"
    assert "ROCm (HIP)" not in system  # None: left out
    assert not [v for v in system.values() if v in ("None", "") or v[:1] in "[{"]


def test_one_isolation_row_per_instance(page):
    rows = TableReader("isolation")
    rows.feed(page[0].read_text())
    header, *body = rows.rows
    assert [r[0] for r in body] == ["cpu:0", "cuda:0", "cuda:1"]
    by_device = {r[0]: dict(zip(header, r)) for r in body}
    assert by_device["cuda:1"]["torch threads"] == f"2; 1 ({HOSTILE})"
    assert by_device["cuda:1"]["runs"] == "3" and by_device["cpu:0"]["runs"] == "2"


def test_small_multiples_shade_each_steady_window(page):
    found = figures(page[0].read_text())
    overview = [f for f in found if f["attrs"].get("id") == "overview"]
    charts = [f for f in found if "chart" in f["attrs"].get("class", "")]
    assert len(overview) == 1 and overview[0]["svgs"] == 1
    # every test has a row, against the baseline and by its steadiness
    for name in ("suite.alpha", "suite.beta", HOSTILE):
        assert name in overview[0]["svg_text"]
    assert "perf / baseline perf" in overview[0]["svg_text"]
    assert [c["attrs"]["data-test"] for c in charts] == [HOSTILE, "suite.alpha"]
    for n, chart in enumerate(charts):
        assert chart["svgs"] == 1
        assert chart["caption"].startswith(chart["attrs"]["data-test"])
        # all runs of a test share one window here: one shaded span per chart
        assert [i for i in chart["ids"] if i.startswith("steady-")] == [f"steady-{n}-0"]
    assert "4 runs, perf 100.50" in charts[1]["caption"]


def test_colour_rules(page):
    text = page[0].read_text()
    # ratio 1.000 against itself: olive ("ok"); all devices within 10% of the best: green.
    assert re.search(r'<td class="ok">1\.000</td>', text)
    assert re.search(r'<td class="good">100%</td>', text)


@needs_chromium
def test_renders_in_chromium(page, tmp_path):
    path, data = page
    shown = show(path, tmp_path, 1400, 1600)
    html = shown.dom
    score = f"{data['scores']['score']:,.2f}"
    assert score in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert html.count("<script") == 1  # the measuring one, no other
    # The cells as the browser holds them: counts are integers, flags name the flags.
    tests = table_rows(html, "tests")
    assert tests["suite.alpha"]["n"] == "4" and tests["suite.alpha"]["fail"] == "0"
    assert tests["suite.beta"]["n"] == "1" and tests["suite.beta"]["fail"] == "1"
    quality = table_rows(html, "quality")
    assert quality["suite.alpha"]["flags"] == "drift:4"
    assert quality["suite.alpha"]["slices"] == "24"
    assert not shown.too_wide(), shown.too_wide()
    assert not shown.blank(), shown.blank()  # text, colours, charts


def test_a_fleet_page_draws_one_band_of_all_runs_and_no_device_legend(tmp_path):
    # 20 nodes of 2 GPUs (a fleet past MAX_BANDS devices): one grey band a chart, not 40
    res = tmp_path / "results"
    for n in range(20):
        for g in range(2):
            job = f"0.{g}"
            write(
                res / f"node{n}",
                result("suite.alpha", job, 100.0 + n, device=f"cuda:{g}", node=f"node{n}"),
            )
    page = tmp_path / "fleet.html"
    done = milarun("report", res, "--html", page)
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    (chart,) = [f for f in figures(text) if "chart" in f["attrs"].get("class", "")]
    assert "40 runs on 40 devices: median and range of all runs" in chart["caption"]
    assert "by device:" not in text
    # the band and its median in grey; no device's own colour (tab20's first is #1f77b4)
    assert "#555555" in text and "#1f77b4" not in text
