"""Issue 27's "done when", on real runs: two quick runs ingested (twice: no duplicate), their
history with verdicts; a third run, the same command with one test slowed on purpose by CPU
hogs pinned to its core, is a Regression of that test only, and `db regressions --fail-on
regression` exits non-zero. On SQLite and on the throw-away PostgreSQL.

Issue 39: a point whose instance was measured busy (its contention record: other processes,
these hogs or other tests' work, took a quarter of its CPU) is Busy, never judged, and the
alerts say they left it out. These steady windows (MIN_SLICES) are often too short for a
contention record (two CPU samples 2 s apart): each point's expected verdict follows what its
result says (the hogs' own Busy case: tests/tender/test_busy_machine.py).

Slow: three real `milarun jobs` runs of two tests (one round, one round, then two: the two
consecutive points a Regression needs), each confined to one core so that the hogs leave the
other tests' core alone (the first two at once, one per core); each run is bounded by slices
(--min-slices), never by a count.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, cli_env, cpu_hogs_lock, milarun
from milarun.measure.runner import PROGRESS_TAG

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group(name="postgres"),
    pytest.mark.usefixtures("cpu_hogs_alone"),  # its hogs and its speeds: no other test's
]

TESTS = ("quick.calibration", "quick.polynome")
SLOWED = "quick.polynome"
HOGS = 4
# A nice of -10 weighs 9548 against a plain process's 1024 (the kernel's table): four such
# hogs take 37/38 of an otherwise idle core, and 37/41 beside three other processes.
HEAVY_NICE = -10
# The steady window of a run of MIN_SLICES (results/steady.py: rates[-20:-2], the last,
# partial slice counted) ends with its slice MIN_SLICES - 2: measured when the instance
# reports MIN_SLICES - 1 slices.
MIN_SLICES = 6
WINDOW_MEASURED = MIN_SLICES - 1
# Rounds of the same run are points in time: the first two runs' one round each make the two
# points a baseline needs, the third run's two rounds the two consecutive points of a
# Regression. A threshold well above a shared machine's run-to-run noise (other processes
# can take half of a test's core for a round); the hogs take four fifths of the slowed
# test's core while it starts (where no other process competes for it) and over nine
# tenths of it over its steady window (HEAVY_NICE, whatever else competes).
THRESHOLD = "0.5"
VERDICT = re.compile(
    r"  (Regression|Suspicious|Improvement|No change|Insufficient data|Busy)(  \(|$)"
)


def verdicts(history: str, test: str) -> list[str]:
    """The verdict of each point of ``test``'s series in `milarun history`'s text."""
    block = history.split(f"{test} @ ", 1)[1].split("\n\n", 1)[0]
    return [m[1] for m in map(VERDICT.search, block.splitlines()[2:]) if m]


def measured_busy(folder: Path, test: str) -> list[bool]:
    """Per round, whether ``test``'s instance was flagged busy (its result's diagnostics)."""
    found = sorted(folder.glob(f"{test}.J*.json"), key=lambda p: p.name.split(".J")[1])
    return ["busy" in json.loads(p.read_text())["diagnostics"]["train"]["flags"] for p in found]


def expected(busy: list[bool], quiet: str) -> list[str]:
    return ["Busy" if b else quiet for b in busy]


def jobs_args(out: Path, data: Path, repeat: int) -> list[str]:
    return [
        "jobs",
        "quick",
        "--name",
        "calibration",
        "polynome",
        "--repeat",
        str(repeat),
        "--devices",
        "cpu:1",
        "-o",
        str(out),
        "-d",
        str(data),
        "--",
        "--min-slices",
        str(MIN_SLICES),
    ]


def count(folder: Path, test: str) -> int:
    return len(list(folder.glob(f"{test}.J*.json")))


def pinned(args: list[str], core: int) -> subprocess.Popen:
    """The real ``milarun`` CLI started on one core (milarun plans its CPU slices within its
    affinity: the instances run there, and only there)."""
    return subprocess.Popen(
        [sys.executable, "-m", "milarun", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
    )


def finished(run: subprocess.Popen) -> subprocess.CompletedProcess:
    stdout, stderr = run.communicate(timeout=600)
    return subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)


def hogs(core: int) -> list[subprocess.Popen]:
    """HOGS busy loops pinned to ``core``, started stopped."""
    started = []
    for _ in range(HOGS):
        # a session of its own, as each instance has: with the kernel's autogroups, the
        # hogs of one session would share one task's worth of CPU between them
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        os.sched_setaffinity(hog.pid, {core})
        hog.send_signal(signal.SIGSTOP)
        started.append(hog)
    return started


def weigh(hogs: list[subprocess.Popen], nice: int) -> None:
    """Each hog's scheduling weight: its own nice, and its session's (with the kernel's
    autogroups on, the CPU is shared between sessions first). Lowering a nice needs root;
    elsewhere the hogs keep the weight of a plain process."""
    for hog in hogs:
        with contextlib.suppress(PermissionError, FileNotFoundError):
            os.setpriority(os.PRIO_PROCESS, hog.pid, nice)
            Path(f"/proc/{hog.pid}/autogroup").write_text(str(nice))


def slices_measured(out: Path, round_: int) -> int:
    """How many slices SLOWED's instance of ``round_`` has measured, by its latest progress
    line (0 before its first)."""
    log = out / "logs" / f"{SLOWED}.J{round_}.0.log"
    lines = log.read_text().split("\n")[:-1] if log.exists() else []  # whole lines only
    shown = [line for line in lines if line.startswith(PROGRESS_TAG)]
    return json.loads(shown[-1].removeprefix(PROGRESS_TAG))["slices"] if shown else 0


def slowed_run(out: Path, data: Path, core: int, db: Path) -> subprocess.CompletedProcess:
    """The same jobs command with two rounds, the hogs running while (and only while) SLOWED
    runs: from the end of the test before it (its result written) to the end of its round.
    Plain processes while the instance starts and ends; heavy ones (HEAVY_NICE) from its
    first slice measured to the last of its steady window, so that the window is slowed
    several times over however many other processes share the core (the tests of the other
    xdist workers), and the start and end of the instance only a few times (the end, 90 s
    at the heavy weight where it is 1 s without the hogs)."""
    burners = hogs(core)
    args = jobs_args(out, data, repeat=2)
    run = pinned([*args[:-3], "--db", str(db), *args[-3:]], core)
    state, switched = "off", []
    try:
        while run.poll() is None:
            now = "off"
            done = count(out, SLOWED) if out.exists() else None
            if done is not None and count(out, TESTS[0]) > done:
                now = "heavy" if 0 < slices_measured(out, done) < WINDOW_MEASURED else "on"
            if now != state:
                weigh(burners, HEAVY_NICE if now == "heavy" else 0)
                for hog in burners:
                    hog.send_signal(signal.SIGSTOP if now == "off" else signal.SIGCONT)
                state = now
                switched.append(f"{time.time():.1f} {now}")
            time.sleep(0.02)
        stdout, stderr = run.communicate(timeout=60)
        # when the hogs ran, for a failure's message
        stdout += "\nhogs: " + ", ".join(switched) + "\n"
    finally:
        for hog in burners:
            hog.kill()
            hog.wait()
        if run.poll() is None:
            run.kill()
    return subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    top = tmp_path_factory.mktemp("done_when")
    data = top / "data"
    folders = [top / f"run{i}" for i in (1, 2, 3)]
    cores = sorted(os.sched_getaffinity(0))
    core = cores[-1]  # the slowed test's
    with cpu_hogs_lock():  # the test's own cpu_hogs_alone comes after this fixture
        # the two first runs at the same time, each on a core of its own where there are
        # two (the suite's longest setup, on one core, was three runs in a row)
        first_two = [
            pinned(jobs_args(folder, data, repeat=1), cores[-1 - i % len(cores)])
            for i, folder in enumerate(folders[:2])
        ]
        for run in first_two:
            done = finished(run)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        first = next(folders[0].glob(f"{SLOWED}.J0.0.*.json"))
        assert json.loads(first.read_text())["isolation"]["cpus"] == [core]
        third_started = dt.datetime.now(dt.timezone.utc).replace(microsecond=0, tzinfo=None)
        done = slowed_run(folders[2], data, core, top / "jobs.sqlite")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # jobs --db: the run ingested at its end
    assert "4 result(s) added, 0 already there" in done.stdout, done.stdout[-2000:]
    return folders, third_started.isoformat(), done.stdout.rsplit("hogs: ", 1)[1]


def test_quick_runs_history_and_a_regression_of_the_slowed_test_only(three_runs, db_url):
    (first, second, third), third_started, hogs_log = three_runs
    for folder in (first, second):
        done = milarun("db", "ingest", folder, "--db", db_url)
        assert done.returncode == 0 and "2 result(s) added" in done.stdout, done.stderr
    again = milarun("db", "ingest", first, second, "--db", db_url)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("0 result(s) added, 2 already there") == 2, again.stdout
    shown = milarun("history", "--db", db_url, "--threshold", THRESHOLD)
    assert shown.returncode == 0, shown.stderr
    for test in TESTS:  # two runs of one round: two points a test, each with its verdict
        busy = measured_busy(first, test) + measured_busy(second, test)
        assert verdicts(shown.stdout, test) == expected(busy, "Insufficient data"), shown.stdout

    done = milarun("db", "ingest", third, "--db", db_url)
    assert done.returncode == 0 and "4 result(s) added" in done.stdout, done.stderr
    shown = milarun("history", "--db", db_url, "--threshold", THRESHOLD)
    slowed, other = verdicts(shown.stdout, SLOWED), verdicts(shown.stdout, TESTS[0])
    assert len(slowed) == len(other) == 4, shown.stdout
    busy = measured_busy(third, SLOWED)
    ended = sorted((json.loads(p.read_text())["finished_at"], p.name) for p in third.glob("*.json"))
    why = shown.stdout + f"\n{ended}\n{hogs_log}\nbusy: {busy}"
    assert [v for v, b in zip(slowed[-2:], busy) if b] == ["Busy"] * sum(busy), why
    # its rounds not measured busy: consecutive points past the threshold, Suspicious then
    # Regression (Regression at once where its history's last point was slower already);
    # without two quiet points before them, no baseline
    judged = [v for v, b in zip(slowed[-2:], busy) if not b]
    if any(measured_busy(first, SLOWED) + measured_busy(second, SLOWED)):
        assert judged == ["Insufficient data"] * len(judged), why
    elif judged:
        assert judged[-1] == ("Regression" if len(judged) == 2 else judged[0]), why
        assert judged[0] in ("Suspicious", "Regression"), why
    assert "Regression" not in other[-2:], shown.stdout
    alerts = milarun(
        "db", "regressions", "--db", db_url, "--threshold", THRESHOLD, "--since", third_started,
        "--fail-on", "regression",
    )  # fmt: skip
    regression = "Regression" in slowed[-2:]
    assert alerts.returncode == (3 if regression else 0), alerts.stdout + alerts.stderr
    found = alerts.stdout.strip().splitlines()
    left_out = (slowed[-2:] + other[-2:]).count("Busy")
    if left_out:  # the busy points: counted, never an alert
        assert found.pop().startswith(f"left out: {left_out} point(s) measured on a busy"), found
    if regression:
        assert found and all(a.startswith(f"Regression: {SLOWED} @ ") for a in found), found
    else:
        assert found == ["no alert"], alerts.stdout
