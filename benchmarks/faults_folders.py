"""The fault campaign, folders and files (issue 24): readers that trusted their input (a folder
where a JSON file is read, a hand-damaged run manifest, names of any length), a disk that fills
in the middle of a suite, a closed stdout's exit code (faults.py's `jobs | head -1`), the log
cap's variable and what it counts, a run that measured 0 examples/s. Run by faults.py."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faultkit import Outcome, clean, milarun, one_line, plant, profile, results_in, start

from fullfs import full_tmpfs
from milarun.results import manifest
from resultfactory import result, write


def plant_write(*args: Any) -> Path:
    return plant(write(*args))  # the scenario's own input


STAMP = "20260101-000000-000000"


def _results(folder: Path) -> Path:
    plant_write(folder, result("suite.good", "0", 100.0))
    plant_write(folder, result("suite.good", "1", 100.0))
    return folder


def folder_as_json_file(tmp: Path) -> Outcome:
    """`rerun <folder>`, `report --weights <folder>`: one line each; a folder named like a
    run manifest beside the results: one warning, the report as usual."""
    res = _results(tmp / "res")
    folder = tmp / "a.json"
    folder.mkdir()
    errors = [milarun("rerun", folder), milarun("report", res, "--weights", folder)]
    (res / f"{manifest.PREFIX}{STAMP}{manifest.SUFFIX}").mkdir()
    report = milarun("report", res)
    warned = "run manifest ignored" in report.stderr
    ok = all(one_line(d) for d in errors) and report.returncode == 0 and clean(report) and warned
    return ok, 0, f"exits {[d.returncode for d in errors]}, report exit {report.returncode}"


def damaged_manifests(tmp: Path) -> Outcome:
    """A manifest whose list is an int, whose start is 1e300 or NaN: `report` passes it by
    with one warning naming it, and reports the results."""
    sound = json.dumps(
        {
            "kind": manifest.KIND,
            "status": "interrupted",
            "reason": "SIGTERM",
            "started_at": 1.7e9,
            "planned": ["suite.good"],
            "ended": [],
        }
    )
    exits: list[int | str] = []
    for i, (part, damage) in enumerate(
        [
            ('"planned": ["suite.good"]', '"planned": 5'),
            ('"ended": []', '"ended": 5'),
            ('"started_at": 1700000000.0', '"started_at": 1e300'),
            ('"started_at": 1700000000.0', '"started_at": NaN'),
        ]
    ):
        res = _results(tmp / f"res{i}")
        path = res / f"{manifest.PREFIX}{STAMP}{manifest.SUFFIX}"
        path.write_text(sound.replace(part, damage))
        done = milarun("report", res)
        warned = [line for line in done.stderr.splitlines() if "run manifest ignored" in line]
        exits.append(done.returncode if clean(done) and len(warned) == 1 else "traceback")
    return exits == [0, 0, 0, 0], 0, f"report exits {exits}"


def names_from_files(tmp: Path) -> Outcome:
    """A 300-character name without a dot, a 10 MB name, a 10 MB device: skipped with one
    line each; the text and the page stay their usual size."""
    res = _results(tmp / "res")
    plant_write(res, result("x" * 300, "0", 100.0), f"long.J0.{STAMP}.json")
    plant_write(res, result("y" * 10_000_000, "0", 100.0), f"huge.J0.{STAMP}.json")
    plant_write(res, result("suite.good", "2", 100.0, device="d" * 10**7), f"dev.J0.{STAMP}.json")
    page = tmp / "r.html"
    done = milarun("report", res, "--html", page)
    alone = tmp / "alone"
    plant_write(alone, result("x" * 300, "0", 100.0), f"long.J0.{STAMP}.json")
    single = milarun("report", alone)
    text = len(done.stdout) + len(done.stderr)
    size = page.stat().st_size if page.exists() else 0
    ok = done.returncode == 0 and clean(done) and text < 20_000 and 0 < size < 2 * 2**20
    return (
        ok and one_line(single),
        0,
        f"exit {done.returncode}, {text:,} characters printed, page {size:,} bytes; "
        f"a long name alone: exit {single.returncode}",
    )


def disk_fills_mid_suite(tmp: Path) -> Outcome:
    """The first job fills the disk: each instance after it cannot write its log, and is
    recorded as failed with the reason; the run ends with its report, no traceback."""
    if os.geteuid() != 0:
        return True, 0, "skipped: needs root to mount a tmpfs"
    prof = profile(
        tmp,
        fill={"experiment": "faulty:fills_disk"},
        b={"experiment": "faulty:steps"},
        c={"experiment": "faulty:steps"},
    )
    with full_tmpfs(tmp / "disk", size="2m", fill=False) as disk:
        proc = start("jobs", prof, "--devices", "cpu:2", "-o", disk / "out")
        stdout, stderr = proc.communicate(timeout=300)
        empty = [p.name for p in (disk / "out" / "logs").iterdir() if p.stat().st_size == 0]
    ended = [line for line in stdout.splitlines() if line.startswith(("done ", "FAIL "))]
    not_started = sum("not started: cannot write its log" in line for line in ended)
    tidy = clean(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    ok = proc.returncode == 1 and tidy and len(ended) == 6 and not_started == 4 and not empty
    return (
        ok,
        max(0, 6 - len(ended)),
        f"exit {proc.returncode}, {len(ended)} of 6 instances recorded "
        f"({not_started} not started), empty logs {empty}",
    )


def bad_log_cap(tmp: Path) -> Outcome:
    """MILARUN_LOG_LIMIT_MB inf, 1e30, abc, -5: one line naming it, nothing run."""
    prof = profile(tmp, run={"experiment": "faulty:steps"})
    runs = {}
    for value in ("inf", "1e30", "abc", "-5"):
        out = tmp / f"out{value}"
        done = milarun(
            "jobs", prof, "--devices", "cpu:1", "-o", out, env={"MILARUN_LOG_LIMIT_MB": value}
        )
        named = f"MILARUN_LOG_LIMIT_MB='{value}'" in done.stderr
        runs[value] = one_line(done) and named and not out.exists()
    return all(runs.values()), 0, f"one line, nothing run: {runs}"


def log_cap_second_run(tmp: Path) -> Outcome:
    """A run into a folder whose log an earlier run filled to the cap: it runs, capped on
    what it writes itself."""
    out, cap = tmp / "out", {"MILARUN_LOG_LIMIT_MB": "1"}
    first = milarun("jobs", profile(tmp, t={"experiment": "faulty:chatty"}), "-o", out, env=cap)
    second = milarun("jobs", profile(tmp, t={"experiment": "faulty:steps"}), "-o", out, env=cap)
    good = [r for r in results_in(out) if r["success"]]
    ok = first.returncode == 1 and second.returncode == 0 and clean(second) and len(good) == 1
    return ok, 0 if good else 1, f"first exit {first.returncode}, second {second.returncode}"


def zero_rate(tmp: Path) -> Outcome:
    """A test that counts no example: a FAIL record (no-rate), exit 1, the report agrees."""
    done = milarun("run", "faulty:zero_rate", "-o", tmp / "out")
    records = results_in(tmp / "out")
    report = milarun("report", tmp / "out", "--format", "json")
    kinds = json.loads(report.stdout)["scores"]["failure_kinds"] if report.stdout else None
    ok = (
        done.returncode == 1
        and clean(done)
        and len(records) == 1
        and records[0]["success"] is False
        and kinds == {"no-rate": 1}
    )
    return ok, max(0, 1 - len(records)), f"exit {done.returncode}, report's failures {kinds}"


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "folder as a JSON file": folder_as_json_file,
    "damaged run manifests": damaged_manifests,
    "names from files": names_from_files,
    "disk fills mid-suite": disk_fills_mid_suite,
    "bad log cap": bad_log_cap,
    "log cap, second run": log_cap_second_run,
    "zero rate": zero_rate,
}
