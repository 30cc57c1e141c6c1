"""The operator's fault campaign: real signals, hostile tests, names and files, a full disk.

Each scenario runs the real `milarun` CLI in subprocesses and says whether milarun survived
it (no traceback, the documented outcome, no process left behind) and how many runs were
lost (an instance that ran but left no result). Prints one line per scenario and the totals.

    sudo uv run python benchmarks/faults.py        # root: the full-disk scenarios mount a tmpfs
    sudo uv run python benchmarks/faults.py disk log   # only the scenarios named so

The other scenarios are in a module per topic: folders and files (issue 24: readers, the
log cap, a disk filling mid-suite, names, a zero rate) in faults_folders.py, the supervisor
(runs cut short, signals, escaped processes) in faults_supervisor.py, warm starts (issue 36)
in faults_warm_start.py, the results database (issue 40) in faults_database.py and
faults_postgres.py (its server: postgres_server.py), bid packages in faults_bid_package.py,
a machine pushed past its limits in faults_limits.py, the doctor's probes in
faults_doctor.py, forged bid packages (issue 42) in faults_forgery.py, work lost or left
unexplained (issue 50: a disk filling under `jobs`, stop signals to the doctor, ...) in
faults_lost_work.py; the helpers they share are in faultkit.py.
`faults.py db: bid: doctor: limits:` runs issue 40's alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from faultkit import (
    ENV,
    SLOW,
    Outcome,
    clean,
    leftovers,
    milarun,
    plant,
    profile,
    results_in,
    start,
    stragglers,
    wrong_content,
)
from faults_bid_package import SCENARIOS as BID_PACKAGE
from faults_database import SCENARIOS as DATABASE
from faults_doctor import SCENARIOS as DOCTOR
from faults_folders import SCENARIOS as FOLDERS
from faults_forgery import SCENARIOS as FORGERY  # forged bid packages (issue 42)
from faults_limits import SCENARIOS as LIMITS
from faults_lost_work import SCENARIOS as LOST_WORK  # full disk, stop signals, ... (issue 50)
from faults_postgres import SCENARIOS as POSTGRES
from faults_supervisor import SCENARIOS as SUPERVISOR
from faults_warm_start import SCENARIOS as WARM_START

from fullfs import fill_up, full_tmpfs  # shared with the tests (faultkit puts tests/ on the path)
from milarun.results import manifest


# -- scenarios: each returns (survived, runs lost, detail) ---------------------------------
def supervisor_killed(tmp: Path, sig: int) -> Outcome:
    out = tmp / "out"
    proc = start("jobs", profile(tmp, slow=SLOW), "--devices", "cpu:2", "-o", out)
    time.sleep(8)  # both instances are measuring
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    time.sleep(5)
    left = leftovers(str(out))
    for p in left:
        p.kill()
    records = results_in(out)
    lost = 0 if sig == signal.SIGKILL else max(0, 2 - len(records))
    kinds = sorted((r.get("failure") or {}).get("kind") or "ok" for r in records)
    cut = manifest.cut_short(out)  # the folder says the run was cut short, and why
    return (
        not left and (sig == signal.SIGKILL or len(records) == 2) and len(cut) == 1,
        lost,
        f"exit {proc.returncode}, {len(left)} process(es) left, records {kinds}, "
        f"manifest: {cut[0].reason if cut else 'not cut short?'}",
    )


def piped_into_head(tmp: Path) -> Outcome:
    """The reader goes away: every instance started is stopped and recorded, nothing is
    left running, exit 128 + SIGPIPE as the README says."""
    out = tmp / "out"
    cmd = (
        f"{sys.executable} -m milarun jobs {profile(tmp, slow=SLOW)} --devices cpu:2 "
        f"-o {out} | head -1; exit ${{PIPESTATUS[0]}}"
    )
    done = subprocess.run(["bash", "-c", cmd], env=ENV, capture_output=True, timeout=300)
    time.sleep(5)
    left = leftovers(str(out))
    for p in left:
        p.kill()
    # the supervisor stops at its first line after `head` left: what it started is recorded
    started, records = len(list((out / "logs").glob("*.log"))), results_in(out)
    ok = not left and done.returncode == 128 + signal.SIGPIPE and len(records) == started
    return (
        ok,
        max(0, started - len(records)),
        f"exit {done.returncode}, {len(left)} process(es) left, "
        f"{len(records)} record(s) of {started} instance(s) started",
    )


def hostile_test_output(tmp: Path) -> Outcome:
    out = tmp / "out"
    done = milarun(
        "jobs",
        profile(
            tmp,
            h={"experiment": "faulty:hostile_progress"},
            inf={"experiment": "faulty:inf_metric"},
        ),
        "--devices",
        "cpu:1",
        "-o",
        out,
    )
    kinds = {r["name"]: (r.get("failure") or {}).get("kind") for r in results_in(out)}
    ok = clean(done) and kinds == {"p.h": None, "p.inf": "nan"}
    return ok, max(0, 2 - len(kinds)), f"exit {done.returncode}, {kinds}"


def two_runs_one_folder(tmp: Path) -> Outcome:
    out = tmp / "out"
    first = start("jobs", profile(tmp, slow=SLOW), "--devices", "cpu:1", "-o", out)
    time.sleep(4)
    second = milarun("jobs", profile(tmp, slow=SLOW), "--devices", "cpu:1", "-o", out)
    first.wait(timeout=300)
    mine = results_in(out)
    ok = second.returncode != 0 and clean(second) and len(mine) == 1 and first.returncode == 0
    return (
        ok,
        max(0, 1 - len(mine)),
        (
            f"second exit {second.returncode}: "
            f"{second.stderr.strip()[-120:]!r}; {len(mine)} result(s)"
        ),
    )


def hostile_name(tmp: Path) -> Outcome:
    done = milarun(
        "jobs", profile(tmp, **{"../escape": SLOW}), "--devices", "cpu:1", "-o", tmp / "out"
    )
    escaped = list(tmp.glob("escape*")) + list((tmp / "out").parent.glob("*escape*"))
    one_line = len(done.stderr.strip().splitlines()) == 1
    return (
        done.returncode != 0 and clean(done) and one_line and not escaped,
        0,
        (f"exit {done.returncode}: {done.stderr.strip()[-120:]!r}"),
    )


def hostile_files(tmp: Path) -> Outcome:
    res = tmp / "res"
    milarun("run", "faulty:nan_metric", "-o", res)  # one real (failed) result
    os.mkfifo(res / "fifo.json")
    (res / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    good = json.loads(next(res.glob("*.FAIL.*.json")).read_text())
    good.update(success=True, timings={"train": {"rates": "fast"}})
    plant(res / "typed.J0.0.20260101-000000-000000.json").write_text(json.dumps(good))
    weights = tmp / "w.json"
    weights.write_text(json.dumps({"nan_metric": 1e308}))
    try:
        report = milarun("report", res, timeout=60)
        weighted = milarun("report", res, "--weights", weights, timeout=60)
    except subprocess.TimeoutExpired:
        return False, 0, "report hung"
    ok = clean(report) and clean(weighted) and "nan" not in weighted.stdout.split("Score")[-1][:40]
    return ok, 0, f"report exit {report.returncode}, weighted exit {weighted.returncode}"


def full_disk(tmp: Path) -> Outcome:
    """Full before the start: `jobs` stops at its write check, nothing runs; and `summary
    -o` / `report --html` onto it are one-line errors."""
    if os.geteuid() != 0:
        return True, 0, "skipped: needs root to mount a tmpfs"
    res = tmp / "res"
    milarun("run", "milabench.models.calibration:main", "-o", res, "--", "--min-slices", "5")
    with full_tmpfs(tmp / "disk") as disk:
        runs = [
            milarun("jobs", profile(tmp, slow=SLOW), "--devices", "cpu:1", "-o", disk / "out"),
            milarun("summary", res, "-o", disk / "s.json"),
            milarun("report", res, "--html", disk / "r.html"),
        ]
        temps = [p.name for p in disk.rglob("*tmp*")]
        logs = list(disk.rglob("*.log"))
    ok = (
        all(
            d.returncode != 0 and clean(d) and len(d.stderr.strip().splitlines()) == 1 for d in runs
        )
        and not temps
        and not logs
    )
    return (
        ok,
        0,
        (
            f"exits {[d.returncode for d in runs]}, temp files {temps}: "
            f"{(runs[0].stderr.strip().splitlines() or [''])[-1][:80]!r}"
        ),
    )


def disk_fills_during_a_run(tmp: Path) -> Outcome:
    """The disk fills while the test measures: the finished measurement is printed whole
    (MILARUN_UNWRITTEN_RESULT), the error is one line, no temp file survives."""
    if os.geteuid() != 0:
        return True, 0, "skipped: needs root to mount a tmpfs"
    with full_tmpfs(tmp / "disk", size="2m", fill=False) as disk:
        proc = start(
            "run",
            "milabench.models.calibration:main",
            "-o",
            disk / "out",
            "--",
            "--min-slices",
            "8",
            # as under `jobs` (this process its supervisor): progress as tagged stdout lines
            env={"MILARUN_SUPERVISOR_PID": str(os.getpid())},
        )
        for line in proc.stdout:
            if line.startswith("MILARUN_PROGRESS"):
                fill_up(disk)
                break
        stdout, stderr = proc.communicate(timeout=120)
        temps = [p.name for p in disk.rglob("*tmp*")]
    kept = any(line.startswith("MILARUN_UNWRITTEN_RESULT") for line in stdout.splitlines())
    ok = proc.returncode != 0 and "Traceback" not in stderr and not temps
    return (
        ok and kept,
        0 if kept else 1,
        (f"exit {proc.returncode}, measurement printed: {kept}, temp files {temps}"),
    )


def log_without_end(tmp: Path) -> Outcome:
    """A test that prints without end: its log stops at the cap, the run is a FAIL."""
    env = {**ENV, "MILARUN_LOG_LIMIT_MB": "4"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "milarun",
            "jobs",
            profile(tmp, chatty={"experiment": "faulty:chatty"}),
            "--devices",
            "cpu:1",
            "-o",
            tmp / "out",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    sizes = [p.stat().st_size for p in (tmp / "out" / "logs").glob("*.log")]
    records = results_in(tmp / "out")
    ok = (
        clean(done)
        and sizes
        and max(sizes) <= 4 * 2**20
        and len(records) == 1
        and not records[0]["success"]
    )
    return ok, max(0, 1 - len(records)), f"exit {done.returncode}, log bytes {sizes}"


def uncreatable_data_root(tmp: Path) -> Outcome:
    (tmp / "file").write_text("")
    runs = [
        milarun(
            "jobs",
            profile(tmp, slow=SLOW),
            "--devices",
            "cpu:1",
            "-o",
            tmp / "o",
            "-d",
            tmp / "file" / "data",
        ),
        milarun("dataset", "mnist", "--synthetic", "-d", tmp / "file" / "data"),
    ]
    ok = all(
        d.returncode != 0 and clean(d) and len(d.stderr.strip().splitlines()) == 1 for d in runs
    )
    return ok, 0, f"exits {[d.returncode for d in runs]}: {runs[0].stderr.strip()[:80]!r}"


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "supervisor SIGKILL": lambda t: supervisor_killed(t, signal.SIGKILL),
    "supervisor SIGHUP": lambda t: supervisor_killed(t, signal.SIGHUP),
    "supervisor SIGTERM": lambda t: supervisor_killed(t, signal.SIGTERM),
    "jobs | head -1": piped_into_head,
    "hostile test output": hostile_test_output,
    "two runs, one folder": two_runs_one_folder,
    "hostile job name": hostile_name,
    "hostile files": hostile_files,
    "full disk": full_disk,
    "disk fills during a run": disk_fills_during_a_run,
    "log without end": log_without_end,
    "uncreatable data root": uncreatable_data_root,
}


def main() -> None:
    """Every scenario, or those whose name holds one of the words given (`faults.py log`)."""
    words = [w.lower() for w in sys.argv[1:]]
    every = {
        **SCENARIOS,
        **FOLDERS,
        **SUPERVISOR,
        **WARM_START,
        **DATABASE,
        **POSTGRES,
        **BID_PACKAGE,
        **LIMITS,
        **DOCTOR,
        **FORGERY,
        **LOST_WORK,
    }
    chosen = {
        name: scenario
        for name, scenario in every.items()
        if not words or any(w in name.lower() for w in words)
    }
    tried = survived = lost = wrong = left = 0
    for name, scenario in chosen.items():
        with tempfile.TemporaryDirectory(prefix="milarun-fault-") as tmp:
            ok, runs_lost, detail = scenario(Path(tmp))
            bad, stray = wrong_content(Path(tmp)), stragglers(tmp)
        tried, survived, lost = tried + 1, survived + ok, lost + runs_lost
        wrong, left = wrong + len(bad), left + stray
        print(
            f"{'SURVIVED' if ok else 'FAILED  '}  {name:22s} lost {runs_lost}  wrong {len(bad)}"
            f"  left {stray}  {detail}" + "".join(f"\n    wrong content: {b}" for b in bad),
            flush=True,
        )
    print(
        f"\ntried {tried}, survived {survived}, runs lost {lost}, saved with wrong content "
        f"{wrong}, leftovers {left}"
    )
    sys.exit(0 if survived == tried and lost == wrong == left == 0 else 1)


if __name__ == "__main__":
    main()
