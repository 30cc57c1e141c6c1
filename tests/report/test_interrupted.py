"""A Ctrl-C and the same command again (issue 39, item 2): the runs the operator stopped are
not failures of the machine, and a folder two runs wrote into says that it pools them."""

from __future__ import annotations

import json

from conftest import milarun
from milarun.results import manifest
from resultfactory import result, write

STOPPED = {"kind": "interrupted", "message": "stopped by SIGINT"}


def two_runs_in_one_folder(folder):
    """The first run stopped by Ctrl-C after one result, the second run whole."""
    for _ in range(2):
        manifest.ManifestWriter.start(folder, "quick", ["quick.a"], 1, ["cpu:0"])
    write(folder, result("quick.a", "0.0", 100.0), "quick.a.J0.0.20260101-000000-000000.json")
    write(folder, result("quick.a", "0.0", None, failure=STOPPED),
          "quick.a.J0.0.FAIL.20260101-000001-000000.json")  # fmt: skip
    write(folder, result("quick.a", "0.0", 104.0), "quick.a.J0.0.20260101-000100-000000.json")
    write(folder, result("quick.b", "0.0", None, failure={"kind": "crash", "message": "died"}),
          "quick.b.J0.0.FAIL.20260101-000101-000000.json")  # fmt: skip


def test_interrupted_runs_are_said_and_not_counted_as_failures(tmp_path):
    two_runs_in_one_folder(tmp_path)
    done = milarun("report", tmp_path, "--format", "json")
    assert done.returncode == 0, done.stderr
    scores = json.loads(done.stdout)["scores"]
    assert (scores["runs"], scores["failures"], scores["interrupted"]) == (3, 1, 1)
    assert scores["failure_kinds"] == {"crash": 1}
    text = milarun("report", tmp_path).stdout
    assert "1 of 3 runs: crash 1" in text
    assert "Interrupted" in text and "stopped by the operator" in text
    assert "2 runs of `milarun jobs` wrote into this folder" in text


def test_a_folder_of_one_run_says_nothing_of_either(tmp_path):
    manifest.ManifestWriter.start(tmp_path, "quick", ["quick.a"], 1, ["cpu:0"])
    write(tmp_path, result("quick.a", "0.0", 100.0))
    done = milarun("report", tmp_path, "--format", "json")
    assert "interrupted" not in json.loads(done.stdout)["scores"]
    text = milarun("report", tmp_path).stdout
    assert "Interrupted" not in text and "wrote into this folder" not in text
