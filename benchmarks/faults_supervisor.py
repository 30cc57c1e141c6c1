"""The fault campaign, the supervisor (issue 24 A-C, E, F, K, M, N, O and the runaway line):
runs cut short in their first job or a later repeat, prepare commands under signals,
processes that escape their instance, --html into a pipe, reruns that cannot be reproduced,
a gather cut short by a full disk. Run by faults.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from faultkit import (
    ENV,
    Outcome,
    clean,
    leftovers,
    milarun,
    one_line,
    plant,
    profile,
    start,
    wait_for,
)

from fullfs import full_tmpfs
from milarun.results import manifest
from milarun.slurm import gather
from resultfactory import result, write

SLEEPY = {"experiment": "faulty:sleepy", "max_duration": 120}
STEPS = {"experiment": "faulty:steps"}


def _kill_and_clear(proc: subprocess.Popen, marker: str) -> list[psutil.Process]:
    proc.kill()
    proc.communicate(timeout=60)
    time.sleep(2)
    left = leftovers(marker)
    for p in left:
        p.kill()
    return left


def killed_in_first_job(tmp: Path) -> Outcome:
    """SIGKILL while the first job runs, nothing recorded: `report` says what was planned
    and lost (each instance) and exits 1, instead of "no results found"."""
    out = tmp / "out"
    proc = start("jobs", profile(tmp, wait=SLEEPY), "--devices", "cpu:2", "-o", out)
    wait_for(lambda: len(psutil.Process(proc.pid).children(recursive=True)) >= 2)
    time.sleep(3)
    left = _kill_and_clear(proc, str(out))
    shown = milarun("report", out)
    named = "no result for p.wait (J0.0, J0.1)" in shown.stdout
    ok = not left and shown.returncode == 1 and clean(shown) and named
    return ok, 0 if named else 2, f"report exit {shown.returncode}, instances named: {named}"


def killed_in_a_later_repeat(tmp: Path) -> Outcome:
    """SIGKILL in repeat 2: the instances it lost are named by job id, though repeat 1
    recorded the same tests; a report of the folder above says so too (recursive)."""
    out = tmp / "runs" / "out"
    prof = profile(tmp, fast=STEPS, wait=SLEEPY)
    proc = start("jobs", prof, "--devices", "cpu:2", "--repeat", "2", "-o", out,
                 "--", "--min-slices", "4")  # fmt: skip
    wait_for(lambda: len(list(out.glob("p.fast.*.json"))) >= 2)
    time.sleep(4)
    left = _kill_and_clear(proc, str(out))
    lost = "p.wait (J0.0, J0.1, J1.0, J1.1), p.fast (J1.0, J1.1)"
    shown = [milarun("report", folder) for folder in (out, tmp / "runs")]
    named = [lost in " ".join(d.stdout.split()) for d in shown]
    ok = not left and all(named) and all(clean(d) and d.returncode == 0 for d in shown)
    return ok, 0 if all(named) else 6, f"named in the folder / above it: {named}"


def _prepare_profile(tmp: Path) -> Path:
    prepare = f"sleep 600 & echo $! > {tmp}/prepare.pid; wait"
    return profile(tmp, run={**STEPS, "prepare": [prepare]})


def prepare_stopped(tmp: Path, sig: int) -> Outcome:
    """A stop signal (or SIGKILL) during a job's prepare: nothing of the prepare runs on;
    a caught signal ends the run as interrupted, exit 128 + signal."""
    out = tmp / "out"
    proc = start("jobs", _prepare_profile(tmp), "--devices", "cpu:2", "-o", out)
    wait_for(lambda: (tmp / "prepare.pid").exists())
    time.sleep(0.5)
    sleeper = int((tmp / "prepare.pid").read_text())
    os.kill(proc.pid, sig)
    _, stderr = proc.communicate(timeout=120)
    time.sleep(1)
    alive = psutil.pid_exists(sleeper) and psutil.Process(sleeper).status() != "zombie"
    if alive:
        os.kill(sleeper, signal.SIGKILL)
    cut = manifest.cut_short(out)
    expected = 128 + sig if sig != signal.SIGKILL else -signal.SIGKILL
    ok = not alive and proc.returncode == expected and "Traceback" not in stderr and len(cut) == 1
    return ok, 0, f"exit {proc.returncode}, prepare left running: {alive}"


def escaped_child(tmp: Path) -> Outcome:
    """A test's setsid() child: killed once its job ends (the supervisor is a subreaper)."""
    out = tmp / "out"
    done = milarun("jobs", profile(tmp, run={"experiment": "faulty:escapes"}), "--devices",
                   "cpu:2", "-o", out, "--no-cgexec", "--", "--min-slices", "4")  # fmt: skip
    pids = [int(p.read_text()) for p in out.glob("escapee.*")]
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    ok = done.returncode == 0 and clean(done) and len(pids) == 2 and not alive
    return ok, 0, f"exit {done.returncode}, {len(alive)} of {len(pids)} escapee(s) left"


def forking_prefix(tmp: Path) -> Outcome:
    """An exec_prefix that forks and exits (`setsid --fork`): the instance is a crash and its
    test, nobody's child any more, does not run on into the next job."""
    out = tmp / "out"
    job = {"experiment": "faulty:records_its_pid", "exec_prefix": ["setsid", "--fork"]}
    done = milarun("jobs", profile(tmp, run=job, after=STEPS), "--devices", "cpu:1", "-o", out,
                   "--no-cgexec", "--", "--min-slices", "30")  # fmt: skip
    left = leftovers(str(out))
    for p in left:
        p.kill()
    ok = done.returncode == 1 and clean(done) and not left
    return ok, 0, f"exit {done.returncode}, {len(left)} process(es) left"


def html_into_a_pipe(tmp: Path) -> Outcome:
    """--html naming a FIFO or /dev/stdout piped into cat: one line, no hang; a results
    file name that is not UTF-8: the page is written."""
    res = tmp / "res"
    plant(write(res, result("suite.good", "0", 100.0)))
    os.mkfifo(tmp / "fifo")
    fifo = milarun("report", res, "--html", tmp / "fifo", timeout=60)
    piped = subprocess.run(
        f"{sys.executable} -m milarun report {res} --html /dev/stdout | cat",
        shell=True, env=ENV, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    plant(res / os.fsdecode(b"\xffbad.J0.20260101-000000-000000.json")).write_text("{}")
    page = milarun("report", res, "--html", tmp / "page.html", timeout=120)
    ok = one_line(fifo) and "not a regular file" in piped.stderr and page.returncode == 0
    return ok and clean(page), 0, f"exits {fifo.returncode}, page {page.returncode}"


def rerun_not_reproducible(tmp: Path) -> Outcome:
    """rerun of a scaling.2 result (two ranks) or of a FAIL record of `slurm check`: one
    line each, nothing written (either would be saved as something it is not)."""
    outcomes = []
    for extra in ({"world_size": 2}, {"written_by": "milarun slurm check"}):
        folder = tmp / str(len(outcomes))
        path = plant(write(folder, {**result("suite.scaling.2", "0", 100.0), **extra}))
        outcomes.append((milarun("rerun", path), len(list(tmp.rglob("*.json")))))
    ok = all(one_line(d) for d, _ in outcomes) and outcomes[-1][1] == 2
    return ok, 0, f"exits {[d.returncode for d, _ in outcomes]}"


def gather_after_full_disk(tmp: Path) -> Outcome:
    """slurm gather cut short by a full shared disk, then run again: nothing lost, each
    log appended once, its own copies not taken for clashes."""
    source = tmp / "local"
    (source / "logs").mkdir(parents=True)
    (source / "logs" / "a.log").write_bytes(b"a" * 6000)
    for i in range(3):
        (source / f"r{i}.json").write_bytes(os.urandom(20_000))
    want = {p.name: p.read_bytes() for p in source.rglob("*") if p.is_file()}
    with full_tmpfs(tmp / "shared", size="160k", fill=False) as target:
        (target / "filler").write_bytes(b"\0" * 110_000)
        try:
            gather.gather(source, target)
            first = "copied all"
        except Exception as err:  # the GatherError this scenario is about
            first = type(err).__name__
        (target / "filler").unlink()
        gather.gather(source, target)
        got = {p.name: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    ok = first == "GatherError" and got == want
    return ok, 0 if got == want else 1, f"first gather: {first}; second: exact {got == want}"


def runaway_output(tmp: Path) -> Outcome:
    """A test printing without end, up to a 300 MB log: the supervisor reads it 1 MiB at a
    time from its end, so its memory stays bounded."""
    out = tmp / "out"
    proc = start("jobs", profile(tmp, run={"experiment": "faulty:chatty", "max_duration": 20}),
                 "--devices", "cpu:1", "-o", out, env={"MILARUN_LOG_LIMIT_MB": "300"})  # fmt: skip
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, psutil.Process(proc.pid).memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.2)
    proc.communicate(timeout=120)
    ok = peak < 400 * 2**20
    return ok, 0, f"exit {proc.returncode}, supervisor peak RSS {peak / 2**20:.0f} MiB"


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "killed in its first job": killed_in_first_job,
    "killed in a later repeat": killed_in_a_later_repeat,
    "SIGTERM during prepare": lambda t: prepare_stopped(t, signal.SIGTERM),
    "SIGHUP during prepare": lambda t: prepare_stopped(t, signal.SIGHUP),
    "SIGKILL during prepare": lambda t: prepare_stopped(t, signal.SIGKILL),
    "escaped child": escaped_child,
    "forking prefix": forking_prefix,
    "html into a pipe": html_into_a_pipe,
    "rerun not reproducible": rerun_not_reproducible,
    "gather after full disk": gather_after_full_disk,
    "runaway output": runaway_output,
}
