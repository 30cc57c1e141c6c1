"""The fault campaign: work lost or left unexplained (issue 50). A results disk that fills
under `jobs` after two instances finished measuring (space returns; a spare folder named),
SIGTERM and SIGHUP to `doctor --active` and to `jobs --doctor`, `rerun` of a crash record,
a `db ingest` that waits in vain on a locked SQLite file, and `report --rank` with a bid that
verify FAILs. Run by faults.py (root: the full-disk scenarios mount a tmpfs)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from faultkit import ENV, Outcome, clean, milarun, profile, results_in, start
from faults_forgery import H100, H100_TENDER, _package

import bidkit
import forgery
from fullfs import full_tmpfs
from milarun.results import manifest
from resultfactory import run_folder


# -- a results disk that fills once both instances measured ---------------------------------
def _filling_jobs(tmp: Path, out: Path, *options: str) -> subprocess.Popen:
    meet = tmp / "meet"
    meet.mkdir()
    arguments = {"--meet": str(meet), "--meet-count": 2, "--min-slices": 4}
    prof = profile(tmp, m={"experiment": "faulty:fills_disk_once_measured", "arguments": arguments})
    return start("jobs", prof, "--devices", "cpu:2", "-o", out, *options)


def disk_fills_space_returns(tmp: Path) -> Outcome:
    """Both results held in memory while the disk is full, written once space returns."""
    with full_tmpfs(tmp / "disk", size="2m", fill=False) as disk:
        out = disk / "out"
        proc = _filling_jobs(tmp, out, "--wait-for-space", "120")
        assert proc.stdout is not None
        said = [proc.stdout.readline()]
        while said[-1] and "held in memory" not in said[-1]:
            said.append(proc.stdout.readline())
        for filler in out.glob("filler.*"):
            filler.unlink()
        stdout, stderr = proc.communicate(timeout=120)
        done = subprocess.CompletedProcess(
            proc.args, proc.returncode, "".join(said) + stdout, stderr
        )
        written = [r for r in results_in(out) if r.get("success")]
        cut = manifest.cut_short(out)
    ok = done.returncode == 0 and clean(done) and len(written) == 2 and not cut
    return (
        ok,
        2 - len(written),
        f"exit {done.returncode}: {said[-1].strip()[:120]!r}, {len(written)} written",
    )


def disk_fills_spare_folder(tmp: Path) -> Outcome:
    """Both results written to --spare-out; the run folder's report says how to move them."""
    spare = tmp / "spare"
    with full_tmpfs(tmp / "disk", size="2m", fill=False) as disk:
        out = disk / "out"
        proc = _filling_jobs(tmp, out, "--spare-out", spare)
        stdout, stderr = proc.communicate(timeout=180)
        report = milarun("report", out)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    moved = [r for r in results_in(spare) if r.get("success")]
    told = "move them here: mv" in " ".join(report.stdout.split())
    ok = done.returncode == 0 and clean(done) and len(moved) == 2 and told
    return (
        ok,
        2 - len(moved),
        f"exit {done.returncode}, {len(moved)} in --spare-out, report tells: {told}",
    )


# -- stop signals to the doctor ---------------------------------------------------------------
def _probes(proc: subprocess.Popen) -> list[psutil.Process]:
    found = []
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return []
    for kid in kids:
        try:
            if "milarun.doctor.active.probe" in " ".join(kid.cmdline()):
                found.append(kid)
        except psutil.Error:  # gone, or a zombie, since
            pass
    return found


def _doctor_stopped(tmp: Path, words: list[object], sig: int) -> Outcome:
    """``sig`` once a probe runs: exit 128 + sig, one line last, no probe or temp folder left."""
    temp = tmp / "temp"
    temp.mkdir()
    proc = start(*words, env={"TMPDIR": str(temp)})
    probes: list[psutil.Process] = []
    deadline = time.monotonic() + 120
    while not (probes and list(temp.glob("milarun-doctor-*/*.spec.json"))):
        if time.monotonic() > deadline or proc.poll() is not None:
            break
        probes = _probes(proc)
        time.sleep(0.05)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    _, alive = psutil.wait_procs(probes, timeout=5)
    for p in alive:
        p.kill()
    last = (stderr.strip().splitlines() or [""])[-1]
    left = list(temp.iterdir())
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    ok = bool(probes) and proc.returncode == 128 + sig and clean(done) and not alive and not left
    ok = ok and last.startswith("milarun: ") and f"stopped by {signal.Signals(sig).name}" in last
    return ok, 0, f"exit {proc.returncode}: {last!r}, {len(alive)} probe(s), {len(left)} temp left"


def doctor_stopped(tmp: Path, sig: int) -> Outcome:
    return _doctor_stopped(tmp, ["doctor", "--active", "quick", "--devices", "cpu:1"], sig)


def jobs_doctor_stopped(tmp: Path, sig: int) -> Outcome:
    prof = profile(tmp, run={"experiment": "faulty:steps"})
    words = ["jobs", prof, "--devices", "cpu:1", "--doctor", "quick", "-o", tmp / "out"]
    survived, lost, detail = _doctor_stopped(tmp, words, sig)
    ran = len(results_in(tmp / "out")) if (tmp / "out").exists() else 0
    return survived and not ran, 0, f"{detail}, {ran} result(s)"


# -- rerun of a crash record ------------------------------------------------------------------
def rerun_a_crash(tmp: Path) -> Outcome:
    prof = profile(
        tmp, segv={"experiment": "faulty:crashes_unless_told", "arguments": {"--crash": True}}
    )
    milarun("jobs", prof, "--devices", "cpu:1", "-o", tmp / "out", "--cold-start")
    (crash,) = (tmp / "out").glob("*.json")
    done = milarun("rerun", crash, "-o", tmp / "again", "--", "--no-crash", "--min-slices", "4")
    new = results_in(tmp / "again")
    ok = done.returncode == 0 and clean(done) and len(new) == 1 and new[0]["success"]
    return ok, 0, f"exit {done.returncode}: {done.stdout.strip()[:100]!r}"


# -- a locked database ------------------------------------------------------------------------
HOLD = (
    "import sqlite3, sys, time\n"
    "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "db.execute('BEGIN IMMEDIATE'); print('holding', flush=True); time.sleep(300)\n"
)


def db_locked(tmp: Path) -> Outcome:
    """A second writer waits its 60 s in vain: one line naming the holder's pid, the way out."""
    db = tmp / "h.sqlite"
    folder = run_folder(tmp / "r1", {"quick.a": [100.0]}, 1.7e9)
    milarun("db", "ingest", folder, "--db", db)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, db], stdout=subprocess.PIPE, text=True, env=ENV
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        done = milarun(
            "db", "ingest", run_folder(tmp / "r2", {"quick.a": [101.0]}, 1.8e9), "--db", db
        )
    finally:
        holder.kill()
        holder.wait()
    line = (done.stderr.strip().splitlines() or [""])[-1]
    ok = done.returncode == 1 and clean(done) and f"pid {holder.pid} (" in line and "kill" in line
    return ok, 0, f"exit {done.returncode}: {line[-200:]!r}"


# -- the ranking of a bid verify FAILs --------------------------------------------------------
def rank_forged_bid(tmp: Path) -> Outcome:
    """The forged H100 package's figures are the best: the text marks it and ranks it last."""
    honest, _ = _package(tmp, H100, H100_TENDER)
    forged = bidkit.edited(honest, tmp, lambda f: forgery.scale(f / "run", "modern.llm", 1.2))
    kept = honest.rename(tmp / "honest.tar.gz")
    done = milarun("report", kept, forged, "--rank")
    rows = [line.split() for line in done.stdout.split("\n\n", 1)[0].splitlines()[1:]]
    order = [(r[0], r[2]) for r in rows if len(r) > 2]
    ok = done.returncode == 0 and clean(done) and order[-1:] == [("2", "FAIL")]
    ok = ok and "note: verify FAILs" in done.stdout
    return ok, 0, f"exit {done.returncode}, rows (rank, verify): {order}"


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "full disk: jobs, space returns": disk_fills_space_returns,
    "full disk: jobs --spare-out": disk_fills_spare_folder,
    "doctor: SIGTERM": lambda t: doctor_stopped(t, signal.SIGTERM),
    "doctor: SIGHUP": lambda t: doctor_stopped(t, signal.SIGHUP),
    "doctor: jobs --doctor, SIGTERM": lambda t: jobs_doctor_stopped(t, signal.SIGTERM),
    "doctor: jobs --doctor, SIGHUP": lambda t: jobs_doctor_stopped(t, signal.SIGHUP),
    "rerun: a crash record": rerun_a_crash,
    "db: ingest on a locked file": db_locked,
    "bid: rank text, a forged bid": rank_forged_bid,
}
