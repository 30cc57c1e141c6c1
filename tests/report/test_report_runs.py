"""The runs part of a report, on the report side (milarun.report.runs and .about): one
isolation row per instance, the system records in words, the header's when/where/what, and
each rate series' steady window; the text and JSON reports show the same values."""

from __future__ import annotations

import json
from pathlib import Path

from milarun.report import about, runs
from milarun.report.build import build_report
from milarun.report.render.format import devices, when
from milarun.report.render.text import to_json, to_text
from milarun.report.summary import summarize
from milarun.results import read, steady
from milarun.results.folder import Loaded
from resultfactory import rate_series, result

REAL_SYSTEM = {
    "hostname": "gpu7",
    "os": "Linux-5.15",
    "cpu": {"model": "AMD EPYC 9454", "count": 96, "physical": 48},
    "ram_gb": 1007.46,
    "python": "3.11.7",
    "milarun": "0.1.0",
    "torch": "2.5.0",
    "cuda": "12.4",
    "hip": None,
    "cudnn": 90100,
    "driver": "550.54.15",
    "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559.0} for i in range(8)],
}


def _threads(data: dict, threads: int | None) -> dict:
    data["isolation"]["torch_threads"] = threads
    return data


def _report(results: list[dict]):
    paths = [Path(f"r{i}.json") for i in range(len(results))]
    loaded = Loaded(Path("/results"), read.views(results), paths)
    return build_report(summarize(results), loaded=loaded)


def test_one_isolation_row_per_instance_even_when_a_test_sets_its_threads():
    """A test that sets its own torch threads (cart: 1) made a second row for its device
    (``cuda:0 #1 ... threads 1`` and ``cuda:0 #2 ... threads 16``): one row per device now,
    the odd value named with its test."""
    results = [
        _threads(result("s.cart", "0.0", 50.0, device="cuda:0"), 1),
        _threads(result("s.bert", "0.0", 50.0, device="cuda:0"), 16),
        _threads(result("s.vae", "0.0", 50.0, device="cuda:0"), 16),
        _threads(result("s.bert", "0.1", 50.0, device="cuda:1"), 16),
        _threads(result("s.bert", "0.2", 50.0, device="cuda:10"), 16),
    ]
    rows = runs.isolation_rows(read.views(results), many_nodes=False)
    assert [r.device for r in rows] == ["cuda:0", "cuda:1", "cuda:10"]  # natural order
    assert [r.runs for r in rows] == [3, 1, 1]
    assert rows[0].threads == "16; 1 (s.cart)"
    assert rows[1].threads == "16" and rows[1].cpus == "0-1"
    assert rows[0].cpuset == "/student0" and rows[0].memory_limit == "8.0 GiB"
    # the text report agrees: one line per device, no "#1"/"#2"
    text = to_text(_report(results))
    block = text.split("Isolation each instance got")[1].split("\n\n")[0]
    lines = [ln for ln in block.splitlines() if ln.startswith("cuda:")]
    assert [ln.split()[0] for ln in lines] == ["cuda:0", "cuda:1", "cuda:10"]
    assert "#" not in block and "16; 1 (s.cart)" in lines[0]


def test_an_instance_whose_runs_differed_names_every_setting():
    many = [_threads(result(f"s.t{i}", "0.0", 50.0), 2) for i in range(4)]
    odd = [_threads(result(f"s.u{i}", "0.0", 50.0), 1) for i in range(4)]
    odd[0]["isolation"]["cpus"] = [0, 1, 2, 3]
    (row,) = runs.isolation_rows(read.views(many + odd), many_nodes=False)
    assert row.runs == 8
    assert row.threads == "1; 2 (4 runs)"  # a tie: the smaller first, more than 3 tests counted
    assert row.cpus == "0-1; 0-3 (s.u0)"


def test_cgroup_v2_shows_the_unified_group_for_both_controllers():
    data = result("s.a", "0.0", 50.0, device="cuda:0")
    data["isolation"]["cgroups"] = {"": "/milarun/student0"}
    (row,) = runs.isolation_rows(read.views([data]), many_nodes=False)
    assert (row.cpuset, row.memory) == ("/milarun/student0", "/milarun/student0")


def test_system_records_read_as_words():
    other = {**REAL_SYSTEM, "hostname": "gpu10"}
    older = {**REAL_SYSTEM, "hostname": "gpu3", "torch": "2.4.0", "gpus": ["Old GPU"] * 2}
    records = about.systems(
        read.views(
            [result("s.a", "0.0", 1.0, system=s) for s in (REAL_SYSTEM, other, older, other)]
        )
    )
    assert len(records) == 2  # the two alike but for their host are one block
    first, second = records
    assert first == {
        "hosts": "gpu7, gpu10",
        "OS": "Linux-5.15",
        "CPU": "AMD EPYC 9454, 96 logical CPUs (48 physical cores)",
        "RAM": "1007.5 GiB",
        "GPUs": "8 x NVIDIA H100 80GB HBM3, 80 GiB",
        "GPU driver": "550.54.15",
        "Python": "3.11.7",
        "milarun": "0.1.0",
        "PyTorch": "2.5.0",
        "CUDA": "12.4",
        "cuDNN": "9.1.0",
    }
    assert second["hosts"] == "gpu3" and second["GPUs"] == "2 x Old GPU"  # one label for all
    assert second["PyTorch"] == "2.4.0"
    none_found = about.systems(
        read.views([result("s.a", "0.0", 1.0, system={"gpus": [], "driver": None, "cudnn": 8902})])
    )
    assert none_found == [{"host": "node1", "GPUs": "none found", "cuDNN": "8.9.2"}]


def test_the_header_says_when_where_on_what_and_which_suite():
    results = [
        result("s.a", "0.0", 1.0, device="cuda:1", suite="standard", finished_at=1767225600.0),
        result("s.a", "0.1", 1.0, device="cuda:0", suite="standard", finished_at=1767312000.0),
        result("s.b", "0", None, ranks=[1.0, 1.0], device="cuda:0,cuda:2", suite="standard"),
        result("s.c", "0.0", 1.0, device="cuda:10", system=REAL_SYSTEM, suite="standard"),
    ]
    found = about.about(read.views(results), many_nodes=False)
    assert found.started == 1767225600.0 - 30.0  # its end less its program time
    assert found.finished == 1767312000.0
    assert found.hosts == ("node1",)
    assert found.devices == ("cuda:0", "cuda:1", "cuda:2", "cuda:10")
    assert found.suites == ("standard",)
    assert found.gpus == ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3, 80 GiB")
    on_cpus = about.about(read.views([result("s.a", "0.0", 1.0, device="cpu:0")]), False)
    assert on_cpus.devices == ("cpu:0",) and on_cpus.gpus == ()  # the host's GPUs unused
    assert devices(found.devices) == "cuda:0-2,10"
    assert when(found.started, found.finished) == "2025-12-31 23:59 to 2026-01-02 00:00 UTC"
    assert when(found.started, found.started + 600) == (
        "2025-12-31 23:59 to 2026-01-01 00:09 UTC"  # past midnight: the second date too
    )
    assert when(found.started - 3600, found.started) == "2025-12-31 22:59 to 23:59 UTC"
    assert when(None, None) == "-" and when(0.0, 1e300) == "-"
    odd = result("s.a", "0.0", 1.0, finished_at=float("inf"), suite=3, device="cpu:0")
    odd["system"] = {**REAL_SYSTEM, "gpus": [{"name": "X", "memory_mb": "lots"}, None, 7]}
    odd_about = about.about(read.views([odd]), many_nodes=False)
    assert (odd_about.started, odd_about.finished, odd_about.suites) == (None, None, ())
    assert about.systems(read.views([odd]))[0]["GPUs"] == "1 x 7; 1 x X"
    text = to_text(_report(results)).splitlines()
    assert text[3:7] == [
        "date:     2025-12-31 23:59 to 2026-01-02 00:00 UTC",
        "host:     node1",
        "devices:  cuda:0-2,10 (NVIDIA A100-SXM4-80GB; NVIDIA H100 80GB HBM3, 80 GiB)",
        "suite:    standard",
    ]


def test_each_series_knows_its_steady_window_in_chart_seconds():
    """Slice i is drawn at x = slice * (i + 1); the span holds exactly the window's slices."""
    rates = rate_series(100.0, slices=30, warmup=4)
    report = _report([result("s.a", "0.0", None, rates=rates)])
    (series,) = report.series["s.a"]
    start, stop = series.steady
    inside = [i for i in range(len(rates)) if start < series.slice * (i + 1) <= stop]
    assert inside == list(steady.slices(len(rates), series.slice)) == list(range(10, 28))
    data = json.loads(to_json(report))
    assert data["series"]["s.a"][0]["steady"] == [5.0, 14.0]
    assert data["about"]["hosts"] == ["node1"]
    assert data["systems"][0]["GPUs"] == "8 x NVIDIA A100-SXM4-80GB"
    short = _report([result("s.b", "0.0", None, rates=[1.0, 1.0])])
    assert short.series["s.b"][0].steady == (0.0, 0.0)  # no window: nothing to shade
