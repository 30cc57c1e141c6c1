"""`milarun slurm check` and `slurm wait` on a node folder whose run manifest was damaged by
hand (issue 24, cause D): the manifest is passed by with one warning naming it, the node's
missing results are still recorded from the submission, never a traceback. Slurm's clients
are stand-ins on PATH that answer for one ended job."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import milarun
from milarun.cli.slurm import JOBS_FAILED
from milarun.results import manifest
from milarun.slurm import submit as slurm

FAKE_SLURM = {
    "squeue": "echo '42|COMPLETED|node2|None'",
    "scontrol": 'if [ "$2" = hostnames ]; then echo node2; '
    "else echo 'JobId=42 JobState=COMPLETED ExitCode=0:0 NodeList=node2'; fi",
    "sacct": "echo 'COMPLETED|0:0|node2'",
}


def _fake_slurm(folder: Path) -> dict[str, str]:
    folder.mkdir()
    for name, body in FAKE_SLURM.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return {
        "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
        "SLURM_CONF": "/nonexistent/slurm.conf",
        "MILARUN_SLURM_SETTLE": "0",
    }


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"started_at": 1e300}, "'started_at' 1e+300"),
        ({"planned": 5}, "'planned'"),
        ({"ended": 5}, "'ended'"),
        (None, "a folder, not a JSON file"),
    ],
)
@pytest.mark.parametrize("command", ["check", "wait"])
def test_a_damaged_node_manifest_is_one_warning(tmp_path, command, fields, fragment):
    out = tmp_path / "out"
    slurm.Submission(
        "fleet",
        "quick",
        "x.sbatch",
        ["quick.polynome"],
        {"quick.polynome": "milabench.models.polynome:main"},
        job_ids=["42"],
    ).save(out / "slurm", "20260101-000000-000000")
    node = out / "nodes" / "node2"
    node.mkdir(parents=True)
    path = manifest.ManifestWriter.start(node, "quick", ["quick.polynome"], 1, ["cpu:0"]).path
    if fields is None:
        path.unlink()
        path.mkdir()  # a folder named like a manifest
    else:
        path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    env = _fake_slurm(tmp_path / "bin")
    words = ["slurm", "check", out, "--job", "42"] if command == "check" else ["slurm", "wait", out]
    done = milarun(*words, env=env, timeout=300)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == JOBS_FAILED, done.stderr  # the node recorded nothing
    warnings = [line for line in done.stderr.splitlines() if "run manifest ignored" in line]
    assert len(warnings) == 1 and str(path) in warnings[0] and fragment in warnings[0], done.stderr
    (fail,) = node.glob("quick.polynome.*.FAIL.*.json")  # recorded from the submission
    assert json.loads(fail.read_text())["failure"]["message"]
