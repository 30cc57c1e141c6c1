"""Reading milarun's HTML pages in tests: their tables and figures, and each page opened in
a real headless Chromium at a given width, its tables measured against the page and a
screenshot taken (shared by the report, history and ranking tests)."""

from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib import image

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_without_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (apt-get install chromium; .ci/run does)"
)


def needs_chromium(test):  # noqa: ANN001, ANN201 (a test function)
    """A test that renders in headless Chromium: slow (1-7 s a launch here), skipped where
    there is none."""
    return pytest.mark.slow(_without_chromium(test))


class TableReader(HTMLParser):
    """The text of each cell of one table (by id) of a page, row by row."""

    def __init__(self, table_id: str):
        super().__init__()
        self.table_id, self.inside, self.rows, self.cell = table_id, False, [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and dict(attrs).get("id") == self.table_id:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell.strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def table_rows(page: str, table_id: str, key: int = 0) -> dict[str, dict[str, str]]:
    """{the row's cell number ``key``: {header: cell text}} of the table with that id."""
    reader = TableReader(table_id)
    reader.feed(page)
    header, *rows = reader.rows
    return {row[key]: dict(zip(header, row)) for row in rows}


class FigureReader(HTMLParser):
    """Each <figure> of a page: its attributes, its caption's text, how many SVGs it holds,
    the ids of the elements inside them and the text they draw."""

    def __init__(self):
        super().__init__()
        self.figures: list[dict] = []
        self.depth = 0
        self.where: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "figure":
            self.figures.append(
                {"attrs": attrs, "caption": "", "svgs": 0, "ids": [], "svg_text": ""}
            )
            self.depth = 1
        elif self.depth:
            figure = self.figures[-1]
            if tag == "figcaption":
                self.where = "caption"
            elif tag == "svg":
                figure["svgs"] += 1
                self.where = "svg_text"
            if attrs.get("id"):
                figure["ids"].append(attrs["id"])

    def handle_endtag(self, tag):
        if tag == "figure":
            self.depth = 0
            self.where = None
        elif tag in ("figcaption", "svg"):
            self.where = None

    def handle_data(self, data):
        if self.depth and self.where:
            self.figures[-1][self.where] += data


def figures(html: str) -> list[dict]:
    reader = FigureReader()
    reader.feed(html)
    return reader.figures


def chromium(*args: str) -> subprocess.CompletedProcess:
    """Headless Chromium with no network, sandbox or GPU (we run as root in a VM)."""
    assert CHROMIUM is not None
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


# Run as the page's last script, once laid out: the viewport's width, the page's scroll
# width, and each table's box with the right edge of the innermost box that clips it (a
# scrolling container, else the viewport).
MEASURE = """<script>(function () {
  var found = {viewport: window.innerWidth, page: document.documentElement.scrollWidth,
               tables: []};
  document.querySelectorAll("table").forEach(function (table, i) {
    var box = table.getBoundingClientRect(), limit = window.innerWidth;
    for (var up = table.parentElement; up; up = up.parentElement) {
      if (getComputedStyle(up).overflowX !== "visible") {
        limit = Math.min(limit, up.getBoundingClientRect().left + up.clientLeft + up.clientWidth);
      }
    }
    found.tables.push({name: table.id || table.className || "table " + i,
                       left: box.left, right: box.right, limit: limit});
  });
  document.body.setAttribute("data-layout", JSON.stringify(found));
})();</script>"""


@dataclass
class Shown:
    """A page as Chromium laid it out at a width: its layout (MEASURE's record), the DOM it
    held and a screenshot's pixels (RGB, 0..1)."""

    layout: dict[str, Any]
    dom: str
    pixels: np.ndarray

    def too_wide(self) -> list[str]:
        """Each table that reaches past the page or the box that clips it, and the page
        itself when it scrolls sideways."""
        out = [
            f"{t['name']}: right edge at {t['right']:.0f} px, past {t['limit']:.0f} px"
            for t in self.layout["tables"]
            if t["right"] > t["limit"] + 0.5
        ]
        if self.layout["page"] > self.layout["viewport"]:
            out.append(f"the page is {self.layout['page']} px wide in {self.layout['viewport']}")
        return out

    def blank(self) -> str | None:
        """Why the screenshot looks blank, or None: some ink, in more than a few colours."""
        ink = (self.pixels < 0.95).any(axis=-1).mean()
        colours = np.unique(self.pixels.reshape(-1, 3), axis=0).shape[0]
        if ink < 0.02 or colours < 50:
            return f"{ink:.2%} non-white pixels in {colours} colours"
        return None


def show(page: Path, work: Path, width: int = 1400, height: int = 2000) -> Shown:
    """``page`` opened at ``width`` x ``height`` px: a copy with MEASURE added is dumped, the
    page itself screenshotted (two Chromium launches)."""
    work.mkdir(parents=True, exist_ok=True)
    text = page.read_text(encoding="utf-8")
    measured = work / f"measured-{page.name}"
    at = text.rindex("</body>")
    measured.write_text(text[:at] + MEASURE + text[at:], encoding="utf-8")
    size = f"--window-size={width},{height}"
    dom = chromium(size, "--dump-dom", measured.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'data-layout="([^"]*)"', dom.stdout)
    assert found, "the measuring script did not run"
    layout = json.loads(html_lib.unescape(found[1]))
    assert layout["viewport"] == width, layout["viewport"]
    shot = work / f"{page.stem}.png"
    done = chromium(size, f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    return Shown(layout, dom.stdout, image.imread(shot)[..., :3])


class TextReader(HTMLParser):
    """The text of every table cell and of every SVG text element of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[tuple[str, str]] = []  # (tag, text)
        self.open: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("td", "th", "text"):
            self.open = tag
            self.texts.append((tag, ""))

    def handle_endtag(self, tag):
        if tag == self.open:
            self.open = None

    def handle_data(self, data):
        if self.open:
            tag, text = self.texts[-1]
            self.texts[-1] = (tag, text + data)


NUMBER = "[-+\u2212]?\\d[\\d,]*(?:\\.\\d+)?"  # \u2212: matplotlib's minus
# a number, its unit, and the second number of a range ("9,850 \u2013 16,160")
WHOLE = re.compile(
    f"({NUMBER})\\s*(?:%|[A-Za-z/$]{{1,4}})?(?:(?:\\s*\u2013\\s*|\\s+-\\s+)({NUMBER})\\s*%?)?"
)
YEAR = re.compile(r"(19|20)\d\d")
E_NOTATION = re.compile(r"\d(?:\.\d*)?[eE][-+]\d")


def number_problems(page: str) -> list[str]:
    """Cells and chart labels that show a number in e-notation, or a number (or a range of
    two) of four digits or more before its point without thousands separators (a chart's
    year label aside)."""
    reader = TextReader()
    reader.feed(page)
    out = []
    for tag, text in ((tag, t.strip()) for tag, t in reader.texts):
        if tag == "text" and YEAR.fullmatch(text):
            continue  # a date axis's year label
        if E_NOTATION.search(text):
            out.append(text)
            continue
        whole = WHOLE.fullmatch(text)
        if whole and any(
            n and len(n.lstrip("-+\u2212").split(".")[0]) >= 4 and "," not in n
            for n in whole.groups()
        ):
            out.append(text)
    return out
