"""A results disk that fills under `milarun jobs` after two instances finished measuring
(issue 50): each hands its result to the supervisor through its result channel (no disk
needed), the supervisor holds them and writes them when space returns, or into the folder
the user named; the report counts them, and a report of the run's folder says how to bring
them home. A real 2 MiB tmpfs, filled by the instances themselves once both are measured."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, cli_env, load_all, milarun
from fullfs import full_tmpfs
from milarun.results import manifest

pytestmark = [pytest.mark.root("mounts a tmpfs"), pytest.mark.slow]


def _profile(tmp_path: Path, **more: dict) -> Path:
    meet = tmp_path / "meet"  # off the results disk: where the instances meet once measured
    meet.mkdir()
    prof = tmp_path / "p.json"
    arguments = {"--meet": str(meet), "--meet-count": 2, "--min-slices": 4}
    fills = {"experiment": "faulty:fills_disk_once_measured", "arguments": arguments}
    prof.write_text(json.dumps({"m": fills, **more}))
    return prof


def _jobs(
    prof: Path, out: Path, *options: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "milarun", "jobs", str(prof), "--devices", "cpu:2", "-o", str(out)]
        + list(options),
        cwd=ROOT,
        env=cli_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _counted(stdout: str) -> bool:
    """The report counts two runs of p.m, none failed."""
    return re.search(r"^p\.m\s+2\s+0\s", stdout, re.M) is not None


def test_held_results_are_written_when_space_returns(tmp_path):
    prof = _profile(tmp_path)
    with full_tmpfs(tmp_path / "disk", size="2m", fill=False) as disk:
        out = disk / "out"
        proc = _jobs(prof, out, "--wait-for-space", "120")
        said = []
        assert proc.stdout is not None
        for line in proc.stdout:
            said.append(line)
            if "finished result(s) held in memory" in line:
                break
        held = said[-1]
        assert held.startswith("2 finished result(s) held in memory:"), "".join(said)
        assert "No space left on device" in held and str(out) in held
        time.sleep(1.5)  # still full: it waits
        assert proc.poll() is None
        for filler in out.glob("filler.*"):  # space returns
            filler.unlink()
        rest, stderr = proc.communicate(timeout=120)
        stdout = "".join(said) + rest
        written = load_all(out)
        report = milarun("report", out)
        cuts = manifest.cut_short(out)
    assert proc.returncode == 0, stdout + stderr
    assert "Traceback" not in stdout + stderr, stderr
    assert "2 held result(s) written in" in stdout
    assert len(written) == 2 and all(r["success"] for r in written.values())
    assert {r["job_id"] for r in written.values()} == {"0.0", "0.1"}
    assert _counted(stdout), stdout  # the report of `jobs`
    assert report.returncode == 0 and _counted(report.stdout), report.stdout + report.stderr
    assert cuts == [] and "could not write" not in report.stdout


def test_held_results_go_to_the_named_folder(tmp_path):
    prof = _profile(tmp_path)
    spare = tmp_path / "spare"
    with full_tmpfs(tmp_path / "disk", size="2m", fill=False) as disk:
        out = disk / "out"
        proc = _jobs(prof, out, "--spare-out", str(spare))
        stdout, stderr = proc.communicate(timeout=180)
        report = milarun("report", out)
        in_out = load_all(out)
    assert "Traceback" not in stdout + stderr, stderr
    assert proc.returncode == 0, stdout + stderr
    moved = load_all(spare)
    assert len(moved) == 2 and all(r["success"] for r in moved.values()) and not in_out
    line = next(x for x in stdout.splitlines() if "result(s) written to" in x)
    assert line.startswith(f"2 result(s) written to {spare} (not {out}:")
    assert _counted(stdout), stdout  # the report of `jobs`, from memory
    # the run's folder: its report says where they are and how to bring them home
    said = " ".join(report.stdout.split())
    assert "2 of them written to another folder" in said, report.stdout
    assert all(str(spare / name) in said for name in moved)
    counted = milarun("report", spare)
    assert counted.returncode == 0 and _counted(counted.stdout), counted.stdout


def test_held_results_go_to_the_temp_folder_when_space_never_returns(tmp_path):
    prof = _profile(tmp_path)
    temp = tmp_path / "temp"  # TMPDIR of the run: not on the full disk
    temp.mkdir()
    with full_tmpfs(tmp_path / "disk", size="2m", fill=False) as disk:
        out = disk / "out"
        proc = _jobs(prof, out, "--wait-for-space", "2", env={"TMPDIR": str(temp)})
        stdout, stderr = proc.communicate(timeout=180)
        report = milarun("report", out)
    assert proc.returncode == 0 and "Traceback" not in stdout + stderr, stdout + stderr
    (folder,) = temp.glob("milarun-unwritten.out.*")
    moved = load_all(folder)
    assert len(moved) == 2 and all(r["success"] for r in moved.values())
    assert f"2 result(s) written to {folder} (not {out}:" in stdout
    assert "held in memory" in stdout and _counted(stdout)
    said = " ".join(report.stdout.split())
    assert f"move them here: mv {folder}/" in said, report.stdout


def test_held_results_are_written_as_soon_as_a_later_job_frees_space(tmp_path):
    """The next job's prepare cleans the disk up: the held results are written as its
    instances end, not at the end of the run, and nothing waits."""
    out = tmp_path / "disk" / "out"
    cleanup = {"experiment": "faulty:steps", "prepare": [f"rm -f {out}/filler.*"]}
    prof = _profile(tmp_path, n={**cleanup, "arguments": {"--min-slices": 4}})
    with full_tmpfs(tmp_path / "disk", size="2m", fill=False):
        proc = _jobs(prof, out, "--wait-for-space", "0")
        stdout, stderr = proc.communicate(timeout=180)
        written = load_all(out)
        cuts = manifest.cut_short(out)
    assert proc.returncode == 0 and "Traceback" not in stdout + stderr, stdout + stderr
    assert f"2 held result(s) written in {out}: it has room again" in stdout
    assert "held in memory" not in stdout
    assert sorted(r["name"] for r in written.values()) == ["p.m", "p.m", "p.n", "p.n"]
    assert all(r["success"] for r in written.values()) and cuts == []
