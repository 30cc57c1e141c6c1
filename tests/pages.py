"""Reading the report's HTML pages in tests (shared by report/test_html and test_report_nodes)."""

from __future__ import annotations

from html.parser import HTMLParser


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
