"""The format version and its one upgrade: every older file reads in today's shape, the
history still identifies it by what the file held, and a newer or unknown version is refused
in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import DATA
from milarun import errors, results
from milarun.results import bulk, read, upgrade
from resultfactory import result, write

GPU_RUNS = DATA / "gpu-runs" / "h100-2026-11-28"


def version_1(name="t.a", job_id="0", steady=100.0, **changes) -> dict:
    """A result as milarun wrote it before the format had a version."""
    data = result(name, job_id, steady, **changes)
    del data["format_version"]
    return data


def test_a_result_written_now_carries_the_version():
    assert result("t.a", "0", 100.0)["format_version"] == results.FORMAT_VERSION == 2


def test_a_version_1_result_without_its_node_reads_where_it_ran(tmp_path):
    data = version_1(slurm={"node": "cn-a01", "job_id": "42"})
    del data["node"]
    path = write(tmp_path, data)
    loaded = results.load_result(path)
    assert loaded["format_version"] == results.FORMAT_VERSION
    assert read.ResultView.from_dict(loaded).node == "cn-a01"
    # the history identifies it by the file's own fields, whichever milarun read it
    assert upgrade.as_written(loaded) == json.loads(path.read_text())
    assert "format_version" not in upgrade.as_written(loaded)


def throttled(version_1_record: bool) -> dict:
    data = (version_1 if version_1_record else result)("t.gpu", "0", 100.0, device="cuda:0")
    train = data["timings"]["train"]
    ends = train["slice_ends"] = [
        1000.0 + train["slice"] * (i + 1) for i in range(len(train["rates"]))
    ]
    data["diagnostics"] = {
        "train": {
            "slices": len(ends),
            "flags": ["throttle"],
            "throttle": {
                "slices": 2,
                "window_slices": 8,
                "gpus": {"cuda:0": {"slices": 2, "reasons": {"SwPowerCap": 2}}},
            },
        }
    }
    data["gpu_monitor"] = {
        "samples": [
            {"time": t, "gpus": {"0": {"sm_clock": 1400.0 + i}}} for i, t in enumerate(ends)
        ]
    }
    return data


def test_a_version_1_throttle_record_gets_its_sm_clock_and_keeps_the_file_as_written(tmp_path):
    path = write(tmp_path, throttled(version_1_record=True))
    loaded = results.load_result(path)
    gpu = loaded["diagnostics"]["train"]["throttle"]["gpus"]["cuda:0"]
    assert gpu["sm_clock_mhz"] is not None and 1400 <= gpu["sm_clock_mhz"] < 1500
    assert upgrade.as_written(loaded) == json.loads(path.read_text())


def test_a_current_record_is_read_as_it_is(tmp_path):
    data = throttled(version_1_record=False)
    path = write(tmp_path, data)
    loaded = results.load_result(path)
    assert "sm_clock_mhz" not in loaded["diagnostics"]["train"]["throttle"]["gpus"]["cuda:0"]
    assert upgrade.as_written(loaded) == json.loads(path.read_text())


@pytest.mark.parametrize(
    "version, says",
    [
        (
            3,
            "'format_version' 3 is newer than this milarun reads (2): read it with a newer milarun",
        ),
        ("2", "'format_version' '2' is not a version number"),
        (0, "'format_version' 0 is not a version number"),
        (True, "'format_version' True is not a version number"),
    ],
)
def test_a_version_this_milarun_cannot_read_is_refused_in_one_line(tmp_path, version, says):
    path = write(tmp_path, result("t.a", "0", 100.0, format_version=version))
    with pytest.raises(errors.ResultError) as caught:
        results.load_result(path)
    assert str(caught.value) == f"{path}: {says}"
    assert "\n" not in str(caught.value)


def test_an_upgraded_result_written_again_holds_only_its_fields(tmp_path):
    path = write(tmp_path, version_1())
    loaded = results.load_result(path)
    again = results.write_atomic(tmp_path / "again.json", loaded)
    assert json.loads(again.read_text()) == upgrade.json_fields(loaded)


@pytest.mark.parametrize("folder", sorted(p.name for p in GPU_RUNS.iterdir() if p.is_dir()))
def test_every_real_gpu_result_reads_through_the_upgrade(folder):
    paths = sorted(p for p in (GPU_RUNS / folder).glob("*.json") if bulk.is_result_file(p.name))
    assert paths
    for path in paths:
        loaded = results.load_result(path)
        assert loaded["format_version"] == results.FORMAT_VERSION
        assert upgrade.as_written(loaded) == json.loads(Path(path).read_text())
        view = read.ResultView.from_dict(loaded)
        assert view.node != "?" and view.milarun_version
