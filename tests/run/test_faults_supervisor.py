"""The supervisor's own faults (issue 13, causes 1-3), with real processes and signals:
``milarun jobs`` killed, hung up on or failing never leaves an instance running, and two
``jobs`` never share an output folder or each other's results."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, cli_env, load_all, milarun, one_line_error
from fullfs import full_tmpfs
from milarun import results
from milarun.results import manifest

# real `jobs` runs, seconds each: out of the fast tier (-m "not slow")
pytestmark = pytest.mark.slow

SLEEPY = {"experiment": "faulty:sleepy", "max_duration": 120}


def write_profile(path: Path, **jobs: dict) -> Path:
    path.write_text(json.dumps({"*": {"max_duration": 60}, **jobs}))
    return path


def start_jobs(
    prof: Path,
    out: Path,
    *test_args: str,
    env: dict[str, str] | None = None,
    stdout: int = subprocess.PIPE,
    options: tuple[str, ...] = (),
) -> subprocess.Popen:
    words = [
        sys.executable,
        "-m",
        "milarun",
        "jobs",
        str(prof),
        "--devices",
        "cpu:2",
        "-o",
        str(out),
        *options,
        *(["--", *test_args] if test_args else []),
    ]
    return subprocess.Popen(
        words, cwd=ROOT, env=cli_env(env), stdout=stdout, stderr=subprocess.PIPE, text=True
    )


def running_instances(proc: subprocess.Popen, count: int = 2) -> list[psutil.Process]:
    """The instance processes once ``count`` of them run (and have imported the test)."""
    deadline = time.time() + 60
    children: list[psutil.Process] = []
    while time.time() < deadline and len(children) < count:
        children = psutil.Process(proc.pid).children(recursive=True)
        time.sleep(0.2)
    assert len(children) >= count, children
    time.sleep(3)  # let the tests start their loops
    return children


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def alive(processes: list[psutil.Process], within: float = 5.0) -> list[psutil.Process]:
    """Those still running (not zombies) after waiting up to ``within`` seconds."""
    deadline = time.time() + within
    while True:
        left = [p for p in processes if _running(p)]
        if not left or time.time() > deadline:
            return left
        time.sleep(0.1)


def assert_none_left(processes: list[psutil.Process], within: float = 5.0) -> None:
    left = alive(processes, within)
    for process in left:  # a failing run must not leave its orphans to the next tests
        process.kill()
    assert not left, [p.cmdline() for p in left]


def test_sigkill_of_jobs_kills_every_instance(tmp_path):
    """SIGKILL (OOM killer, scheduler) cannot be caught: the kernel's parent-death signal
    takes the instances with it, none runs on to write a result nobody supervised."""
    prof = write_profile(tmp_path / "long.json", wait=SLEEPY, after=SLEEPY)
    proc = start_jobs(prof, tmp_path / "out")
    children = running_instances(proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert_none_left(children)
    assert not list((tmp_path / "out").glob("*.json"))
    # The run manifest says it was cut short and which tests never recorded an end.
    (cut,) = manifest.cut_short(tmp_path / "out")
    assert cut.status == "running" and "killed?" in cut.describe()
    assert cut.without_result == ("long.wait", "long.after")  # in the order they run
    assert cut.missing() == "long.wait (J0.0, J0.1), long.after (J0.0, J0.1)"
    # No result at all: report still says what the run planned and lost, and exits 1.
    shown = milarun("report", tmp_path / "out")
    assert shown.returncode == 1 and "Traceback" not in shown.stderr, shown.stderr
    assert "no milarun results found" in shown.stdout
    assert "no result for long.wait (J0.0, J0.1), long.after (J0.0, J0.1)" in shown.stdout


def test_sigkill_in_a_later_repeat_names_each_lost_instance(tmp_path):
    """Plans are (test, job id) pairs: killed in repeat 2, the report names the instances
    it lost, though repeat 1 recorded some of the same tests; so does a report of the
    folder above (results are read recursively, and so are cut-short runs)."""
    prof = write_profile(tmp_path / "two.json", fast={"experiment": "faulty:steps"}, wait=SLEEPY)
    proc = start_jobs(prof, tmp_path / "out", "--min-slices", "4", options=("--repeat", "2"))
    deadline = time.time() + 240
    while time.time() < deadline and len(list((tmp_path / "out").glob("two.fast.*.json"))) < 2:
        time.sleep(0.2)
    children = running_instances(proc)  # two.wait's, in repeat 1
    proc.kill()
    proc.communicate(timeout=30)
    assert_none_left(children)
    (cut,) = manifest.cut_short(tmp_path / "out")
    lost = "two.wait (J0.0, J0.1, J1.0, J1.1), two.fast (J1.0, J1.1)"
    assert cut.missing() == lost
    for folder in (tmp_path / "out", tmp_path):
        shown = milarun("report", folder)
        assert shown.returncode == 0, shown.stderr
        assert f"no result for {lost}" in " ".join(shown.stdout.split()), shown.stdout


def test_sigkill_reaches_an_instance_behind_a_forking_prefix(tmp_path):
    """A prefix that forks (as torchrun does for its ranks) puts the test out of reach of
    the parent-death signal: the instance's own watchdog sees its parent gone."""
    prefix = ["sh", "-c", '"$@"; exit $?', "sh"]  # not an exec: sh waits for the test
    prof = write_profile(tmp_path / "fork.json", wait={**SLEEPY, "exec_prefix": prefix})
    proc = start_jobs(prof, tmp_path / "out")
    children = running_instances(proc, count=4)  # sh and its test, twice
    assert any("sleepy" in " ".join(c.cmdline()) for c in children)
    proc.kill()
    proc.communicate(timeout=30)
    assert_none_left(children)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_sighup_or_sigterm_stops_and_records_every_instance(tmp_path, sig):
    """The ssh session closed (SIGHUP), the scheduler asks to stop (SIGTERM): like Ctrl-C,
    every instance stopped and recorded, exit 128+signal; the report names what never ran."""
    prof = write_profile(tmp_path / "long.json", wait=SLEEPY, after=SLEEPY)
    proc = start_jobs(prof, tmp_path / "out")
    children = running_instances(proc)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr and sig.name in stderr
    assert_none_left(children)
    (cut,) = manifest.cut_short(tmp_path / "out")
    assert cut.status == "interrupted" and sig.name in cut.reason
    assert cut.without_result == ("long.after",)
    shown = " ".join(milarun("report", tmp_path / "out").stdout.split())  # lines wrap
    assert "was cut short" in shown and "no result for long.after" in shown, shown
    found = load_all(tmp_path / "out")
    assert len(found) == 2
    for name, result in found.items():
        assert ".FAIL." in name
        assert result["failure"]["kind"] == "interrupted"


def test_an_error_in_the_supervisor_stops_and_records_every_instance(tmp_path):
    """The hook MILARUN_TEST_SUPERVISOR_FAULT (read by the supervisor, set only by tests)
    raises inside the supervisor once both instances started: they are stopped and
    recorded, then the error goes on up."""
    prof = write_profile(tmp_path / "long.json", wait=SLEEPY)
    proc = start_jobs(prof, tmp_path / "out", env={"MILARUN_TEST_SUPERVISOR_FAULT": "started"})
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 1
    assert "test fault in the supervisor" in stderr
    found = load_all(tmp_path / "out")
    assert len(found) == 2, stderr
    for result in found.values():
        assert result["failure"]["kind"] == "interrupted"
    assert not [
        p
        for p in psutil.process_iter(["environ"])
        if (p.info["environ"] or {}).get("MILARUN_TEST_SUPERVISOR_FAULT") and p.pid != os.getpid()
    ]


@pytest.mark.slow
def test_closed_stdout_stops_and_records_every_instance(tmp_path):
    """``milarun jobs ... | head -1``: the reader goes away, the next line the supervisor
    prints (at the latest its 10 s progress lines) fails with a broken pipe."""
    prof = write_profile(tmp_path / "long.json", wait=SLEEPY)
    proc = start_jobs(prof, tmp_path / "out")
    assert proc.stdout.readline()  # the header, as `head -1` reads it
    children = running_instances(proc)
    proc.stdout.close()
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 128 + signal.SIGPIPE, stderr
    assert_none_left(children)
    found = load_all(tmp_path / "out")
    assert len(found) == 2
    for result in found.values():
        assert result["failure"]["kind"] == "interrupted"


@pytest.mark.slow
def test_second_jobs_into_a_held_folder_is_refused(tmp_path):
    """Two ``jobs`` into one folder: the second is refused at once, naming the folder and
    the holder; the first reads its own results, not a newer file of the same name."""
    prof = write_profile(tmp_path / "two.json", run={"experiment": "faulty:steps"})
    out = tmp_path / "out"
    first = start_jobs(prof, out, "--min-slices", "8")
    running_instances(first)
    # Another run's FAIL record of the same name and job id, newer than the first's own.
    stamp = results.utc_stamp()
    for job_id in ("0.0", "0.1"):
        foreign = out / results.result_filename("two.run", job_id, False, stamp)
        foreign.write_text(
            json.dumps(
                {
                    "name": "two.run",
                    "job_id": job_id,
                    "success": False,
                    "failure": {"kind": "crash"},
                }
            )
        )
    second = milarun("jobs", prof, "--devices", "cpu:2", "-o", out, timeout=300)
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert str(out) in lines[0] and f"pid {first.pid}" in lines[0]
    stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stdout + stderr
    own = [r for r in load_all(out).values() if "metrics" in r]
    assert len(own) == 2 and all(r["success"] for r in own)
    assert "FAIL" not in stdout.split("\n\n")[0]  # the done lines: each instance passed


def test_a_log_that_grows_without_end_is_capped(tmp_path):
    """A test printing without end stops at the log cap (here 1 MiB) with a FAIL record,
    instead of filling the disk."""
    prof = write_profile(tmp_path / "p.json", chatty={"experiment": "faulty:chatty"})
    proc = start_jobs(prof, tmp_path / "out", env={"MILARUN_LOG_LIMIT_MB": "1"})
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    logs = list((tmp_path / "out" / "logs").glob("*.log"))
    assert len(logs) == 2 and all(log.stat().st_size <= 2**20 for log in logs)
    found = load_all(tmp_path / "out")
    assert len(found) == 2
    for result in found.values():
        assert not result["success"] and "File too large" in result["error"]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_child_that_left_the_process_group_does_not_outlive_the_run(tmp_path):
    """A test's setsid() child escapes the kill of its process group: the supervisor is a
    child subreaper, so the orphan becomes its own, and it kills it before the next job."""
    prof = write_profile(tmp_path / "esc.json", run={"experiment": "faulty:escapes"})
    done = milarun("jobs", prof, "--devices", "cpu:2", "-o", tmp_path / "out", "--no-cgexec",
                   "--", "--min-slices", "4", timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    pids = [int(p.read_text()) for p in (tmp_path / "out").glob("escapee.*")]
    assert len(pids) == 2
    assert all(_gone(pid) for pid in pids), pids
    assert "left running by the job's instances" in done.stderr + done.stdout


def test_a_prefix_that_forks_and_exits_leaves_no_test_running(tmp_path):
    """`setsid --fork` returns at once: the instance is a crash, and its test (reparented
    to the supervisor) is killed, not left to slow the next job down."""
    prefix = ["setsid", "--fork"]
    prof = write_profile(
        tmp_path / "fork.json",
        run={"experiment": "faulty:records_its_pid", "exec_prefix": prefix},
        after={"experiment": "faulty:steps"},
    )
    done = milarun("jobs", prof, "--devices", "cpu:1", "-o", tmp_path / "out", "--no-cgexec",
                   "--", "--min-slices", "30", timeout=300)  # fmt: skip
    assert done.returncode == 1, done.stderr
    mine = [
        p
        for p in psutil.process_iter(["cmdline"])
        if str(tmp_path / "out") in " ".join(p.info["cmdline"] or ()) and not _gone(p.pid)
    ]
    assert not mine, [p.info["cmdline"] for p in mine]
    found = load_all(tmp_path / "out")
    assert any(".FAIL." in name and r["name"] == "fork.run" for name, r in found.items())


def _prepare_profile(tmp_path: Path) -> Path:
    # the prepare's shell starts a sleep of its own: the whole session must go
    prepare = f"sleep 600 & echo $! > {tmp_path}/prepare.pid; wait"
    return write_profile(
        tmp_path / "prep.json", run={"experiment": "faulty:steps", "prepare": [prepare]}
    )


def _prepare_running(tmp_path: Path, proc: subprocess.Popen) -> int:
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "prepare.pid").exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    time.sleep(0.3)
    return int((tmp_path / "prepare.pid").read_text())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_during_a_prepare_stops_it_and_records_the_run(tmp_path, sig):
    proc = start_jobs(_prepare_profile(tmp_path), tmp_path / "out")
    sleeper = _prepare_running(tmp_path, proc)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr
    assert _gone(sleeper)
    (cut,) = manifest.cut_short(tmp_path / "out")
    assert cut.status == "interrupted" and sig.name in cut.reason
    assert cut.missing() == "prep.run (J0.0, J0.1)"
    assert "$ sleep 600" in (tmp_path / "out" / "logs" / "prep.run.prepare.log").read_text()


def test_sigkill_during_a_prepare_takes_the_prepare_with_it(tmp_path):
    proc = start_jobs(_prepare_profile(tmp_path), tmp_path / "out")
    sleeper = _prepare_running(tmp_path, proc)
    prepare = psutil.Process(proc.pid).children(recursive=True)
    assert any(p.pid == sleeper for p in prepare)
    proc.kill()
    proc.communicate(timeout=30)
    assert_none_left(prepare)  # the guard, its shell and the shell's sleep
    (cut,) = manifest.cut_short(tmp_path / "out")
    assert cut.status == "running" and "killed?" in cut.describe()


# -- issue 24: the log cap, a full disk during a run, a closed stdout --------------------
@pytest.mark.parametrize("value", ["inf", "1e30", "nan", "abc", "-5", "0.5"])
def test_a_bad_log_limit_is_one_line_before_anything_runs(tmp_path, value):
    prof = write_profile(tmp_path / "p.json", run={"experiment": "faulty:steps"})
    done = milarun(
        "jobs", prof, "--devices", "cpu:1", "-o", tmp_path / "out",
        env={"MILARUN_LOG_LIMIT_MB": value},
    )  # fmt: skip
    line = one_line_error(done)
    assert f"MILARUN_LOG_LIMIT_MB='{value}'" in line and "from 1 to" in line
    assert not (tmp_path / "out").exists()


def test_the_log_cap_is_on_what_this_run_writes(tmp_path):
    """A second run into a folder appends to the logs of the first: the cap is on what it
    writes, not on what the log already held."""
    out = tmp_path / "out"
    env = {"MILARUN_LOG_LIMIT_MB": "1"}
    chatty = write_profile(tmp_path / "p.json", t={"experiment": "faulty:chatty"})
    assert milarun("jobs", chatty, "--devices", "cpu:1", "-o", out, env=env).returncode == 1
    (log,) = (out / "logs").glob("*.log")
    first = log.stat().st_size
    assert first > 2**20 - 4096  # the first run filled its log to the cap
    steps = write_profile(tmp_path / "p.json", t={"experiment": "faulty:steps"})
    done = milarun("jobs", steps, "--devices", "cpu:1", "-o", out, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert first < log.stat().st_size <= first + 2**20
    (ok,) = [r for r in load_all(out).values() if r["success"]]
    assert "File too large" not in (ok.get("error") or "")


@pytest.mark.root("mounts a tmpfs")
def test_a_disk_that_fills_during_a_run_records_every_instance(tmp_path):
    """The first job fills the disk: the jobs after it cannot write their logs. Each is
    recorded as failed with the reason (in the report: the disk is full), the run goes on
    to its report, no traceback, no empty log of an instance that never started. The run
    manifest (its room held from the start) still says the run completed, and which
    instances have no result and why (issue 40): the report names them."""
    prof = write_profile(
        tmp_path / "p.json",
        fill={"experiment": "faulty:fills_disk"},
        b={"experiment": "faulty:steps"},
        c={"experiment": "faulty:steps"},
    )
    with full_tmpfs(tmp_path / "disk", size="2m", fill=False) as disk:
        proc = start_jobs(prof, disk / "out")
        stdout, stderr = proc.communicate(timeout=300)
        logs = sorted(p.name for p in (disk / "out" / "logs").glob("*.log"))
        ((_, run),) = manifest.run_manifests(disk / "out")
        (cut,) = manifest.cut_short(disk / "out")
        report = milarun("report", disk / "out")
    assert run.status == "complete" and len(run.ended) == 6
    assert cut.reason == "6 result(s) not written: cannot write (No space left on device)"
    lost = "p.fill (J0.0, J0.1), p.b (J0.0, J0.1), p.c (J0.0, J0.1)"
    said = " ".join(report.stdout.split())
    assert f"could not write every result ({cut.reason}): no result for {lost}" in said
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stdout + stderr, stderr
    for job in ("p.b", "p.c"):
        for job_id in ("0.0", "0.1"):
            assert (
                f"FAIL   {job} J{job_id} cpu:{job_id[-1]}  crash: not started: cannot write its "
                f"log {disk / 'out' / 'logs' / f'{job}.J{job_id}.log'} (No space left on device)"
            ) in stdout
    for job in ("p.fill", "p.b", "p.c"):  # the report counts them: 2 runs, 2 failed
        assert re.search(rf"^{re.escape(job)}\s+2\s+2\s", stdout, re.M), stdout
    assert logs == ["p.fill.J0.0.log", "p.fill.J0.1.log"]


def test_closed_stdout_exits_128_plus_sigpipe(tmp_path):
    """`milarun jobs ... | head -1`: the README's 128 + signal, 141, as a shell expects of a
    command that wrote into a closed pipe; the run is recorded all the same."""
    prof = write_profile(tmp_path / "p.json", run={"experiment": "faulty:steps"})
    out = tmp_path / "out"
    words = " ".join(
        [sys.executable, "-m", "milarun", "jobs", str(prof), "--devices", "cpu:1", "-o", str(out)]
    )
    done = subprocess.run(
        ["bash", "-c", f"{words} | head -1; exit ${{PIPESTATUS[0]}}"],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 128 + signal.SIGPIPE, done.stderr
    assert "Traceback" not in done.stderr
    assert len(load_all(out)) == 1
    (cut,) = manifest.cut_short(out)
    assert "output was closed" in cut.reason
