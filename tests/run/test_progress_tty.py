"""`milarun jobs` on a real terminal (a tmux pane): one live row per running instance, then
the permanent done lines once the rows are gone."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import pytest

from conftest import ROOT, cli_env

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(
    TMUX is None, reason="tmux not installed (apt-get install tmux; .ci/run does)"
)
WIDTH, HEIGHT = 150, 40
EXIT_MARK = "milarun-exit="
TIMEOUT = 300  # seconds: a bound for a hung run, not the run's length
# a live row: test, device, rate, slices/min-slices (then count, ETA, time, state)
ROW = r"quick\.polynome\s+{device}\s+[\d,.]+ ex/s\s+\d+/8\s"


def _tmux(socket: str, *args: str) -> str:
    done = subprocess.run(
        [TMUX, "-S", socket, *args], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout


def _wait_for(socket: str, found: Callable[[str], bool], history: bool = False) -> str:
    """Capture the pane until ``found(screen)`` holds or the run has ended; the last capture
    (``history``: with the lines scrolled off the top)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        screen = _tmux(
            socket, "capture-pane", "-p", "-t", "jobs", *(["-S", "-"] if history else [])
        )
        if found(screen) or EXIT_MARK in screen or time.monotonic() > deadline:
            return screen
        time.sleep(0.2)


@pytest.mark.slow
def test_jobs_shows_a_live_row_per_instance_on_a_terminal(tmp_path):
    # the same environment as conftest.milarun; the pane is the process's stdout
    env = cli_env()
    env.pop("TMUX", None)  # run our own server even inside someone's tmux
    command = shlex.join(
        [
            sys.executable,
            "-m",
            "milarun",
            "jobs",
            "quick",
            "--name",
            "polynome",
            "calibration",
            "--devices",
            "cpu:2",
            "-o",
            str(tmp_path / "out"),
            "-d",
            str(tmp_path / "data"),
            "--",
            "--min-slices",
            "8",
        ]
    )
    # keep the pane after the run so its last screen can be read
    script = f"{command}; echo {EXIT_MARK}$?; sleep 600"
    socket = str(tmp_path / f"tmux-{uuid.uuid4().hex[:8]}.sock")
    subprocess.run(
        [
            TMUX,
            "-S",
            socket,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "jobs",
            "-x",
            str(WIDTH),
            "-y",
            str(HEIGHT),
            "-c",
            str(ROOT),
            script,
        ],
        env=env,
        check=True,
        timeout=30,
    )
    try:

        def both_rows(screen: str) -> bool:
            return all(re.search(ROW.format(device=d), screen) for d in ("cpu:0", "cpu:1"))

        screen = _wait_for(socket, both_rows)
        assert both_rows(screen), screen
        assert re.search(r"test\s+device\s+rate\s+slices\s+count\s+ETA", screen), screen

        final = _wait_for(socket, lambda s: False, history=True)
        assert f"{EXIT_MARK}0" in final, final
        for test in ("polynome", "calibration"):
            for job, device in (("J0.0", "cpu:0"), ("J0.1", "cpu:1")):
                assert re.search(
                    rf"^done   quick\.{test} {job} {device}  [\d,.]+ examples/s$", final, re.M
                ), final
        assert not re.search(r"ex/s\s+\d+/8\s", final), final  # the live rows are gone
    finally:
        subprocess.run([TMUX, "-S", socket, "kill-server"], capture_output=True, timeout=30)
