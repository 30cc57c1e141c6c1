"""Reading a folder of many results (issue 27's 100,000 files): the monitor samples read for
the peak memory and dropped, each sealed result's view shared, and the files read by worker
processes past a threshold, with the same results, skips and order as read here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from milarun.report import summary
from milarun.results import bulk, parts, read
from milarun.results.folder import load_dir
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
    loaded = load_dir(tmp_path)
    gpu_run, cpu_run = sorted(loaded.results, key=lambda view: view.job_id)
    for run in (gpu_run, cpu_run):
        assert run.data["gpu_monitor"]["samples"] == [] and run.data["cpu_monitor"]["samples"] == []
    assert gpu_run.peak_memory == 3000.5
    assert cpu_run.peak_memory == 950.0
    assert summary.summarize(loaded.results)["t.a"]["peak_memory"] == 3000.5
    # the same peak as read from the samples, unsealed (the history's reading)
    whole = load_dir(tmp_path, seal=False).results
    assert sorted(parts.monitor_peak(r.data) for r in whole) == [950.0, 3000.5]
    assert all(r.data["cpu_monitor"]["samples"] for r in whole)


def test_a_file_cannot_plant_a_peak_or_a_view(tmp_path):
    data = monitored("0.0", [100.0], [])
    data.update({"('monitors', 'peak_memory')": 1e9, "('memo',)": "x", "('sealed',)": True})
    write(tmp_path, data)
    (loaded,) = load_dir(tmp_path).results
    assert loaded.peak_memory == 100.0
    # a result not read by the loader is never sealed: its views remember nothing
    again = json.loads(json.dumps(data))
    assert read.ResultView.from_dict(again).rate() == 100.0
    assert read.ResultView.from_dict(again)._memo == {}
    assert read.ResultView.from_dict(loaded.data)._memo[("rate", "train")] == 100.0


def folder_of_many(tmp_path: Path) -> Path:
    for n in range(40):
        write(tmp_path / f"n{n % 3}", monitored(f"{n}.0", [float(n)], []))
    (tmp_path / "n0" / "torn.json").write_text('{"name": "t.a", "succ')
    (tmp_path / "n1" / "list.json").write_text("[1, 2]")
    write(tmp_path / "n2", {**monitored("99.0", [1.0], []), "timings": 3})
    return tmp_path


def test_workers_read_what_this_process_reads_in_the_same_order(tmp_path, monkeypatch):
    folder = folder_of_many(tmp_path)
    here = load_dir(folder)
    monkeypatch.setattr(bulk, "PARALLEL_FROM", 4)
    monkeypatch.setattr(bulk, "CHUNK", 7)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the files are read in this process")
    shared = load_dir(folder)
    assert [str(p) for p in shared.paths] == [str(p) for p in here.paths]
    assert [(s.path, s.reason) for s in shared.skipped] == [
        (s.path, s.reason) for s in here.skipped
    ]
    assert len(here.skipped) == 3 and len(here.results) == 40
    strip = lambda r: {k: v for k, v in r.items() if isinstance(k, str)}  # noqa: E731
    assert [strip(r.data) for r in shared.results] == [strip(r.data) for r in here.results]
    assert [v.rate() for v in shared.results] == [v.rate() for v in here.results]
    assert summary.summarize(shared.results) == summary.summarize(here.results)


def _dies_on_the_second_chunk(task: bulk.Task, seal: bool, digests: bool) -> list[bulk.Found]:
    folder, names = task
    if any(name.startswith("t.a.J8.") for name in names):
        os._exit(9)  # as a worker the kernel killed for memory
    return [bulk.read_one(folder / name, seal) for name in names]


def test_a_worker_that_dies_leaves_its_files_to_this_process(tmp_path, monkeypatch):
    folder = folder_of_many(tmp_path)
    here = load_dir(folder)
    monkeypatch.setattr(bulk, "PARALLEL_FROM", 4)
    monkeypatch.setattr(bulk, "CHUNK", 7)
    monkeypatch.setattr(bulk, "_read_chunk", _dies_on_the_second_chunk)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the files are read in this process")
    found = load_dir(folder)
    assert [str(p) for p in found.paths] == [str(p) for p in here.paths]
    assert len(found.results) == 40 and len(found.skipped) == 3


def test_each_result_is_given_its_own_file(tmp_path):
    # paths are made as asked for (results.folder.FilePaths): each the file its result was read from
    loaded = load_dir(folder_of_many(tmp_path))
    assert len(loaded.paths) == len(loaded.results) == 40
    for path, data in zip(loaded.paths, loaded.results, strict=True):
        assert isinstance(path, Path) and path.is_file()
        assert json.loads(path.read_text())["job_id"] == data.job_id
    assert loaded.paths[-2:] == [loaded.paths[38], loaded.paths[39]]
    assert not {s.path for s in loaded.skipped} & {str(p) for p in loaded.paths}
