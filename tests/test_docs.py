"""The README is a first screen and a map: every page under docs/ is reached from it, and
every relative link of the README and the pages leads to a file that exists (issue 39)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(page.read_text()) if "://" not in m.group(1)]


def test_every_relative_link_leads_to_a_file():
    broken = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page in [README, *sorted(DOCS.glob("*.md"))]
        for target in links(page)
        if not (page.parent / target).exists()
    ]
    assert not broken, broken


def test_every_page_is_reached_from_the_readme_and_the_index():
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    from_readme = {Path(t).name for t in links(README) if t.startswith("docs/")}
    from_index = {Path(t).name for t in links(DOCS / "README.md")}
    assert pages <= from_readme, sorted(pages - from_readme)
    assert pages <= from_index, sorted(pages - from_index)


def test_the_readme_is_a_first_screen():
    text = README.read_text()
    assert len(text.splitlines()) <= 140
    for heading in ("## Quick start", "## The end report", "## Tests", "## Where to read next"):
        assert heading in text
    assert 'uv run pytest -m "not slow"' in text
    # A figure in the README is a measured one: no placeholder is left in it.
    assert not re.search(r"\b(SAMPLE_REPORT|TIMES_[A-Z]+|TODO|TBD)\b", text)
    # A clone has no DESIGN.md: the README does not send a reader to it.
    assert "DESIGN.md" not in text
