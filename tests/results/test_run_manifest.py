"""RunManifest (issue 52): the run manifest's record, typed, written byte for byte as before
(every manifest of the real GPU runs reads and writes back the same text), its machine record
(.sysinfo) typed, and a field a hand damaged read as absent."""

from __future__ import annotations

import json

from conftest import DATA
from milarun.results import manifest
from milarun.results.files import json_text
from milarun.results.run_manifest import EndedInstance, RunManifest

REAL = sorted((DATA / "gpu-runs").rglob(f"{manifest.PREFIX}*{manifest.SUFFIX}"))


def test_every_real_manifest_reads_and_writes_back_the_same_text():
    assert len(REAL) >= 5
    for path in REAL:
        ((found, run),) = manifest.run_manifests(path.parent, recursive=False)
        assert found == path and run.status == "complete" and run.ended, path
        assert json_text(run.to_dict()) == path.read_text().rstrip(), path
        machine = manifest.kept_machine(path)
        assert machine is not None and machine.system.hostname, path
        gpus = json.loads(manifest.machine_path(path).read_text())["system"]["gpus"]
        assert [g.name for g in machine.system.gpus] == [g["name"] for g in gpus], path


def test_the_writer_s_file_is_the_record_s_and_reads_back_equal(tmp_path):
    writer = manifest.ManifestWriter.start(
        tmp_path, "quick", ["quick.b", "quick.a"], 1, ["cpu:0"], [("quick.a", "0.0")], "ab" * 16
    )
    writer.instance_ended("quick.a", "0.0", None, False, unwritten="cannot write (disk full)")
    writer.instance_written("quick.a", "0.0", tmp_path / "elsewhere" / "quick.a.json")
    writer.finish("complete")
    text = writer.path.read_text()
    data = json.loads(text)
    assert list(data) == [
        "kind", "profile", "status", "reason", "started_at", "finished_at", "pid", "host",
        "devices", "repeat", "planned", "instances", "ended", "challenge",
    ]  # fmt: skip
    assert data["planned"] == ["quick.a", "quick.b"] and data["instances"] == [["quick.a", "0.0"]]
    assert data["ended"] == [
        {"test": "quick.a", "job_id": "0.0", "success": False, "result": None,
         "unwritten": "cannot write (disk full)",
         "written_to": str(tmp_path / "elsewhere" / "quick.a.json")}
    ]  # fmt: skip
    ((_, run),) = manifest.run_manifests(tmp_path)
    assert run == writer.manifest and json_text(run.to_dict()) == text.rstrip()
    assert run.span.finished_at == run.finished_at and run.span.results == frozenset()


def test_a_damaged_field_reads_as_absent_never_a_crash():
    run = RunManifest.from_dict(
        {"kind": manifest.KIND, "status": "failed", "reason": None, "started_at": 1, "pid": "x",
         "host": 7, "devices": ["cpu:0", 3], "finished_at": float("nan"), "planned": ["s.a"],
         "instances": [["s.a"], ["s.a", "0.0"], "x"], "challenge": 5,
         "ended": [{"test": "s.a", "job_id": 1, "success": "yes", "result": ["x"]}]}
    )  # fmt: skip
    assert (run.pid, run.host, run.devices, run.finished_at, run.challenge) == (
        None, None, ["cpu:0"], None, None,
    )  # fmt: skip
    assert run.instances == [("s.a", "0.0")] and run.profile is None
    assert run.ended == [EndedInstance("s.a", None, False, None)]
    assert run.span.started_at == 1.0 and run.span.finished_at is None
