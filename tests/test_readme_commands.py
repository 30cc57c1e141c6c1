"""Issue 49: a command the README gives to run works as written on a fresh clone: through
`uv run` (a bare `milarun ...` answers "command not found" until a venv is activated). A
code span that only names a command (`milarun doctor`) is not one to run."""

from __future__ import annotations

import re

from conftest import ROOT

README = ROOT / "README.md"


def commands(text: str) -> list[str]:
    """Each command line of the fenced blocks, and each inline code span with arguments."""
    found = []
    fences = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    found += [line.strip() for block in fences for line in block.splitlines()]
    inline = re.sub(r"```.*?```", "", text, flags=re.S)
    found += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", inline)]
    return [c for c in found if re.search(r"(^|\s)milarun\s+\S+\s+\S", c)]


def test_every_milarun_command_to_run_goes_through_uv_run():
    found = commands(README.read_text(encoding="utf-8"))
    assert any("--name convnet" in c for c in found)  # the researcher's line is read
    bare = [c for c in found if not re.match(r"(uv run |#|srun uv run )", c)]
    assert bare == [], bare
