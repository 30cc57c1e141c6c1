"""Reading a folder of many results (issue 27's 100,000 files): the monitor samples read for
the peak memory and dropped, each sealed result's view shared, and the files read by worker
processes past a threshold, with the same results, skips and order as read here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from milarun import results
from milarun.report import summary
from milarun.results import bulk, read
from resultfactory import result, write


def monitored(job: str, gpu_used: list[float] | None, rss: list[float]) -> dict:
    gpu = [
        {"t": float(i), "gpus": {"0": {"memory": [m, 81920.0]}}}
        for i, m in enumerate(gpu_used or [])
    ]
    cpu = [{"t": float(i), "rss_mb": r} for i, r in enumerate(rss)]
    return result(
        "t.a", job, 100.0, device="cuda:0",
        gpu_monitor={"interval": 1.0, "samples": gpu},
        cpu_monitor={"interval": 1.0, "samples": cpu},
    )  # fmt: skip


def test_sealing_keeps_the_peak_and_drops_the_samples(tmp_path):
    write(tmp_path, monitored("0.0", [100.0, 3000.5, float("nan"), 2000.0], [900.0, 950.0]))
    write(tmp_path, monitored("1.0", None, [900.0, 1e400, 950.0, True]))  # inf and a bool
    loaded = summary.load_dir(tmp_path)
    gpu_run, cpu_run = sorted(loaded.results, key=lambda r: r["job_id"])
    for run in (gpu_run, cpu_run):
        assert run["gpu_monitor"]["samples"] == [] and run["cpu_monitor"]["samples"] == []
    assert read.ResultView.from_dict(gpu_run).peak_memory == 3000.5
    assert read.ResultView.from_dict(cpu_run).peak_memory == 950.0
    assert summary.summarize(loaded.results)["t.a"]["peak_memory"] == 3000.5
    # the same peak as read from the samples, unsealed (the history's reading)
    whole = summary.load_dir(tmp_path, seal=False).results
    assert sorted(read.monitor_peak(r) for r in whole) == [950.0, 3000.5]
    assert all(r["cpu_monitor"]["samples"] for r in whole)


def test_a_file_cannot_plant_a_peak_or_a_view(tmp_path):
    data = monitored("0.0", [100.0], [])
    data.update({"('monitors', 'peak_memory')": 1e9, "('memo',)": "x", "('sealed',)": True})
    write(tmp_path, data)
    (loaded,) = summary.load_dir(tmp_path).results
    assert read.ResultView.from_dict(loaded).peak_memory == 100.0
    # a result not read by the loader is never sealed: its views remember nothing
    again = json.loads(json.dumps(data))
    assert read.ResultView.from_dict(again).rate() == 100.0
    assert read.ResultView.from_dict(again)._memo == {}
    assert read.ResultView.from_dict(loaded)._memo[("rate", "train")] == 100.0


def folder_of_many(tmp_path: Path) -> Path:
    for n in range(40):
        write(tmp_path / f"n{n % 3}", monitored(f"{n}.0", [float(n)], []))
    (tmp_path / "n0" / "torn.json").write_text('{"name": "t.a", "succ')
    (tmp_path / "n1" / "list.json").write_text("[1, 2]")
    write(tmp_path / "n2", {**monitored("99.0", [1.0], []), "timings": 3})
    return tmp_path


def test_workers_read_what_this_process_reads_in_the_same_order(tmp_path, monkeypatch):
    folder = folder_of_many(tmp_path)
    here = summary.load_dir(folder)
    monkeypatch.setattr(bulk, "PARALLEL_FROM", 4)
    monkeypatch.setattr(bulk, "CHUNK", 7)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the files are read in this process")
    shared = summary.load_dir(folder)
    assert [str(p) for p in shared.paths] == [str(p) for p in here.paths]
    assert [(s.path, s.reason) for s in shared.skipped] == [
        (s.path, s.reason) for s in here.skipped
    ]
    assert len(here.skipped) == 3 and len(here.results) == 40
    strip = lambda r: {k: v for k, v in r.items() if isinstance(k, str)}  # noqa: E731
    assert [strip(r) for r in shared.results] == [strip(r) for r in here.results]
    views = [read.ResultView.from_dict(r) for r in shared.results]
    assert [v.rate() for v in views] == [read.ResultView.from_dict(r).rate() for r in here.results]
    assert summary.summarize(shared.results) == summary.summarize(here.results)


def _dies_on_the_second_chunk(paths: list[Path], seal: bool) -> list[bulk.Found]:
    if any(p.name.startswith("t.a.J8.") for p in paths):
        os._exit(9)  # as a worker the kernel killed for memory
    return [bulk.read_one(p, seal) for p in paths]


def test_a_worker_that_dies_leaves_its_files_to_this_process(tmp_path, monkeypatch):
    folder = folder_of_many(tmp_path)
    here = summary.load_dir(folder)
    monkeypatch.setattr(bulk, "PARALLEL_FROM", 4)
    monkeypatch.setattr(bulk, "CHUNK", 7)
    monkeypatch.setattr(bulk, "_read_chunk", _dies_on_the_second_chunk)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the files are read in this process")
    found = summary.load_dir(folder)
    assert [str(p) for p in found.paths] == [str(p) for p in here.paths]
    assert len(found.results) == 40 and len(found.skipped) == 3


def kept(data: dict, gpu: object = None, cpu: object = None) -> dict:
    """``data`` whose monitor records keep these peaks (as machine.monitors writes them)."""
    data = json.loads(json.dumps(data))
    data["gpu_monitor"]["peak_memory_mib"] = gpu
    data["cpu_monitor"]["peak_rss_mib"] = cpu
    return data


def test_a_kept_peak_is_read_without_the_samples(tmp_path):
    # a peak unlike its samples': the report read the record's, not the samples
    write(tmp_path, kept(monitored("0.0", [100.0, 200.0], [900.0]), gpu=5000.0, cpu=950.0))
    (path,) = tmp_path.glob("*.json")
    skimmed = results.skim_decode(path.read_bytes())
    assert skimmed is not None and skimmed["gpu_monitor"]["samples"] == []
    (loaded,) = summary.load_dir(tmp_path).results
    assert read.ResultView.from_dict(loaded).peak_memory == 5000.0
    (whole,) = summary.load_dir(tmp_path, seal=False).results  # the same rule, read whole
    assert read.monitor_peak(whole) == 5000.0 and len(whole["gpu_monitor"]["samples"]) == 2


BASE = monitored("0.0", [100.0, 3000.5], [900.0, 950.0])
# Files the skimming reader reads itself (True) or leaves to the whole reader (False)
VARIANTS = {
    "peaks kept": (kept(BASE, gpu=3000.5, cpu=950.0), True),
    "no peak kept (an older file)": (BASE, True),
    "a peak that is no number": (kept(BASE, gpu="big", cpu=True), True),
    "a negative peak": (kept(BASE, gpu=-1.0, cpu=None), True),
    "null samples": ({**BASE, "gpu_monitor": {"interval": 1.0, "samples": None}}, True),
    "samples that are no list": ({**BASE, "gpu_monitor": {"samples": {"0": 1}}}, False),
    "a monitor that is no object": ({**BASE, "cpu_monitor": [1, 2]}, False),
    "an unknown monitor key": ({**BASE, "cpu_monitor": {"samples": [], "mine": 1}}, False),
    "an unknown key, nested deep": ({**BASE, "mine": json.loads("[" * 80 + "]" * 80)}, False),
    "an integer past 64 bits": ({**BASE, "metrics": {"loss": 2**70}}, False),
    "an integer under -2**63": ({**BASE, "metrics": {"loss": -(2**63) - 1}}, False),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_skimmed_and_whole_readings_agree(variant, tmp_path):
    data, skimmed = VARIANTS[variant]
    write(tmp_path, data)
    (path,) = tmp_path.glob("*.json")
    assert (results.skim_decode(path.read_bytes()) is not None) is skimmed
    found, reason = bulk.read_one(path, seal=True)
    # the whole reader, then sealed: what reports read before results.skim
    whole = results.load_result(path)
    expected_reason = bulk.invalid_result(whole)
    assert reason == expected_reason
    if reason is None:
        read.seal(whole)
        strip = lambda r: {k: v for k, v in r.items() if isinstance(k, str)}  # noqa: E731
        assert strip(found) == strip(whole)
        assert found[read.PEAK_MEMORY] == whole[read.PEAK_MEMORY]


def test_a_hand_edited_nan_is_read_as_before(tmp_path):
    write(tmp_path, BASE)
    (path,) = tmp_path.glob("*.json")
    path.write_text(path.read_text().replace("900.0", "NaN"))  # the stdlib reads NaN
    assert results.skim_decode(path.read_bytes()) is None
    found, reason = bulk.read_one(path, seal=True)
    assert reason is None and read.ResultView.from_dict(found).peak_memory == 3000.5
