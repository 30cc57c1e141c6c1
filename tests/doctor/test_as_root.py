"""The fix lines that need root name this installation's milarun (uv, Poetry or a plain venv
alike) and `sudo` only where it is needed and exists (issue 39, item 10)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from milarun.doctor import check

SCRIPT = Path(sys.executable).parent / "milarun"


def test_root_needs_no_sudo_and_names_this_installation(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    line = check.as_root("cgroups setup --devices cpu:2")
    assert line == f"`{SCRIPT} cgroups setup --devices cpu:2`"
    assert "uv run" not in line and "sudo" not in line


def test_a_user_gets_sudo_where_there_is_one_else_is_told_to_be_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/sudo" if name == "sudo" else None)
    assert check.as_root("cgroups teardown") == f"`sudo {SCRIPT} cgroups teardown`"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert check.as_root("cgroups teardown") == f"`{SCRIPT} cgroups teardown` as root"


def test_the_command_it_names_runs():
    words = check.as_root("cgroups --help").strip("`").replace("sudo ", "").split()
    done = subprocess.run(words, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "setup" in done.stdout
