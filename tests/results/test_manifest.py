"""The run manifest read back (milarun/results/manifest.py): instances as (test, job id)
pairs, and manifests a hand damaged, which never crash a reader."""

from __future__ import annotations

import json

import pytest

from milarun.results import manifest


def write(folder, **data):
    base = {"kind": manifest.KIND, "status": "interrupted", "reason": "SIGTERM",
            "started_at": 1.7e9, "planned": ["s.a", "s.b"], "ended": []}  # fmt: skip
    path = folder / f"{manifest.PREFIX}20260101-000000-000000{manifest.SUFFIX}"
    path.write_text(json.dumps({**base, **data}))
    return path


def test_lost_instances_are_named_by_job_id(tmp_path):
    write(
        tmp_path,
        instances=[["s.a", "0.0"], ["s.a", "0.1"], ["s.b", "0.0"], ["s.b", "0.1"]],
        ended=[{"test": "s.a", "job_id": "0.0"}, {"test": "s.b", "job_id": "0.1"}],
    )
    (cut,) = manifest.cut_short(tmp_path)
    assert cut.lost == (("s.a", "0.1"), ("s.b", "0.0"))
    assert cut.without_result == ("s.a", "s.b")  # each test recorded once, lost once
    assert cut.missing() == "s.a (J0.1), s.b (J0.0)"
    assert manifest.planned_instances_since(tmp_path, 0) == {
        ("s.a", "0.0"), ("s.a", "0.1"), ("s.b", "0.0"), ("s.b", "0.1")
    }  # fmt: skip


def test_a_manifest_older_than_instances_goes_by_test_names(tmp_path):
    write(tmp_path, ended=[{"test": "s.a", "job_id": "0.0"}])
    (cut,) = manifest.cut_short(tmp_path)
    assert cut.without_result == ("s.b",) and cut.missing() == "s.b"
    assert manifest.planned_since(tmp_path, 0) == {"s.a", "s.b"}
    assert manifest.planned_instances_since(tmp_path, 0) == {("s.a", None), ("s.b", None)}


def test_runs_cut_short_below_the_folder_are_found(tmp_path):
    (tmp_path / "day1" / "gpu0").mkdir(parents=True)
    write(tmp_path / "day1" / "gpu0")
    (cut,) = manifest.cut_short(tmp_path)
    assert str(tmp_path / "day1" / "gpu0") in cut.describe()


@pytest.mark.parametrize(
    "damage",
    [
        {"ended": 5},
        {"ended": [3, None, {"test": 1}]},
        {"planned": 7},
        {"instances": [["s.a"], 4, ["s.b", 0], "x"]},
        {"instances": 3},
        {"started_at": 1e300},
        {"started_at": "yesterday"},
        {"status": ["x"] * 10_000},
        {"reason": "r" * 1_000_000},
    ],
)
def test_a_damaged_manifest_never_crashes_a_reader(tmp_path, damage):
    write(tmp_path, **damage)
    for cut in manifest.cut_short(tmp_path):  # passed by with a warning, or read safely
        assert len(cut.describe()) < 400 and len(cut.missing()) < 400
    manifest.planned_since(tmp_path, 0)
    manifest.planned_instances_since(tmp_path, 0)


def test_nan_start_and_a_folder_named_like_a_manifest(tmp_path, caplog):
    path = write(tmp_path)
    path.write_text(path.read_text().replace("1700000000.0", "NaN"))
    (tmp_path / f"{manifest.PREFIX}x{manifest.SUFFIX}").mkdir()
    assert manifest.cut_short(tmp_path) == []
    assert manifest.planned_since(tmp_path, 0) is None
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "is not a time" in warned and "run manifest ignored" in warned
