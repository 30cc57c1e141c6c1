"""The real GPU files' reports, pinned whole: text, JSON and HTML of the H100 modern run against
the shipped H200 baseline, and of the H200 inference run. Any change to what the report
computes or how it lays it out shows here as a diff (issue 52: refactors keep these
byte-identical). MILARUN_UPDATE_PINNED=1 rewrites the files (read the diff before committing)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import DATA, ROOT, milarun

PINNED = DATA / "report-pinned"
RUNS = DATA / "gpu-runs"
CASES = {
    "h100-modern": [RUNS / "h100-2026-11-28" / "modern", "--compare", "modern/h200"],
    "h200-inference": [RUNS / "h200-inference-2026-11-28"],
}

# One worker makes every report of this file (each a milarun process).
pytestmark = pytest.mark.xdist_group(name="report_pinned_gpu")


def _report(name: str, fmt: str, tmp: Path) -> str:
    html = tmp / f"{name}.html"
    extra = ["--html", html] if fmt == "html" else ["--format", fmt]
    done = milarun("report", *CASES[name], "--price", "30000", *extra)
    assert done.returncode == 0, done.stderr
    text = html.read_text() if fmt == "html" else done.stdout
    # the repository's and the temporary folder's places are this machine's, not the report's
    return text.replace(str(ROOT), "<repo>").replace(str(tmp), "<tmp>")


@pytest.mark.parametrize("fmt", ["text", "json", "html"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_report_of_real_gpu_files_is_pinned(name, fmt, tmp_path):
    found = _report(name, fmt, tmp_path)
    path = PINNED / f"{name}.{ {'text': 'txt'}.get(fmt, fmt) }"
    if os.environ.get("MILARUN_UPDATE_PINNED") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(found)
    assert found == path.read_text(), f"the report differs from {path.name}"
