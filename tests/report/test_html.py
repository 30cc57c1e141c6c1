"""The HTML report, opened in a real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from matplotlib import image

from conftest import milarun
from pages import TableReader
from resultfactory import result, write

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (apt-get install chromium; .ci/run does)"
)
HOSTILE = "<script>alert(1)</script>"


def chromium(*args: str) -> subprocess.CompletedProcess:
    """Headless Chromium with no network, sandbox or GPU (we run as root in a VM)."""
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--no-first-run",
            "--hide-scrollbars",
            "--proxy-server=127.0.0.1:9",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def table_rows(html: str, table_id: str) -> dict[str, dict[str, str]]:
    """{first cell: {header: cell text}} of the table with that id."""
    parser = TableReader(table_id)
    parser.feed(html)
    header, *rows = parser.rows
    return {row[0]: dict(zip(header, row)) for row in rows}


# Every test here on one worker, in a row: the page below is made once.
pytestmark = pytest.mark.xdist_group(name="html_page")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("html")
    res = root / "results"
    drifted = {
        "train": {"slices": 24, "cv": 0.01, "drift": 0.05, "warmup": 1.0, "flags": ["drift"]}
    }
    for i, rate in enumerate([100.0, 104.0, 97.0, 101.0]):
        write(
            res,
            result(
                "suite.alpha",
                f"{i // 2}.{i % 2}",
                rate,
                device=f"cuda:{i % 2}",
                diagnostics=drifted,
            ),
        )
    write(res, result(HOSTILE, "0.0", 20.0), "hostile.J0.0.20260101-000000-000000.json")
    write(
        res,
        result(HOSTILE, "0.1", 21.0, device="cuda:1"),
        "hostile.J0.1.20260101-000000-000000.json",
    )
    write(
        res,
        result(
            "suite.beta",
            "0.0",
            None,
            failure={"kind": "crash", "message": "killed by SIGILL"},
            error="Traceback (most recent call last)\n  <b>bold</b>\nIllegal instruction",
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
    assert text.count("<svg") == 2  # one chart per test with successful runs
    assert "killed by SIGILL" in text and "&lt;b&gt;bold&lt;/b&gt;" in text
    assert "Isolation each instance got" in text and "/student1" in text
    assert "NVIDIA A100-SXM4-80GB" in text  # the system record


def test_colour_rules(page):
    text = page[0].read_text()
    # ratio 1.000 against itself: olive ("ok"); all devices within 10% of the best: green.
    assert re.search(r'<td class="ok">1\.000</td>', text)
    assert re.search(r'<td class="good">100%</td>', text)


@needs_chromium
def test_renders_in_chromium(page, tmp_path):
    path, data = page
    dom = chromium("--dump-dom", path.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    score = f"{data['scores']['score']:,.2f}"
    assert score in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html
    # The cells as the browser holds them: counts are integers, flags name the flags.
    tests = table_rows(html, "tests")
    assert tests["suite.alpha"]["n"] == "4" and tests["suite.alpha"]["fail"] == "0"
    assert tests["suite.beta"]["n"] == "1" and tests["suite.beta"]["fail"] == "1"
    quality = table_rows(html, "quality")
    assert quality["suite.alpha"]["flags"] == "drift:4"
    assert quality["suite.alpha"]["slices"] == "24"
    shot = tmp_path / "shot.png"
    done = chromium("--window-size=1280,1600", f"--screenshot={shot}", path.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    pixels = image.imread(shot)[..., :3]
    not_white = (pixels < 0.95).any(axis=-1).mean()
    assert not_white > 0.02, f"page looks blank ({not_white:.2%} non-white pixels)"
    assert np.unique(pixels.reshape(-1, 3), axis=0).shape[0] > 50  # text, colours, charts
