"""Was the machine busy? Others' share of a run's CPUs over its steady window
(milarun/measure/contention.py): known counters, and a real run beside a CPU hog pinned
to the same CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, cli_env, load_all, milarun
from milarun.measure import contention
from milarun.measure.diagnostics import steady_state
from milarun.results.records import RateRecord


def record(t0: float, n: int = 24, width: float = 0.5) -> RateRecord:
    ends = tuple(t0 + width * (i + 1) for i in range(n))
    return RateRecord(None, 0.0, 0.0, 0, None, 0, 0, width, None, (100.0,) * n, slice_ends=ends)


def monitor(t0: float, others: float, cpus: int = 2, seconds: int = 14) -> dict:
    """One sample a second: our tree used `cpus * (1 - others)` CPU-seconds a second and
    the CPUs were always busy."""
    return {
        "samples": [
            {
                "time": t0 + t,
                "cpus": cpus,
                "cpus_busy_s": 1000.0 + cpus * t,
                "own_cpu_s": 50.0 + cpus * (1 - others) * t,
                "load1": 1.0 + t / 10,
            }
            for t in range(seconds)
        ]
    }


def test_share_of_our_cpus_taken_by_others_over_the_window():
    rec = record(100.0)  # window: slices 4-21, i.e. 102.0 to 111.0
    found = contention.contention_record(rec, monitor(100.0, others=0.4))
    assert found is not None
    assert found.others == pytest.approx(0.4)
    assert found.cpus == 2 and found.span == pytest.approx(9.0)  # samples at 102 ... 111
    assert found.load == pytest.approx(2.1)  # highest inside the window (t = 11)
    diag = contention.with_contention(steady_state(rec.rates), rec, monitor(100.0, 0.4))
    assert "busy" in diag.flags and diag.to_dict()["contention"]["others"] == pytest.approx(0.4)
    calm = contention.with_contention(steady_state(rec.rates), rec, monitor(100.0, 0.05))
    assert "busy" not in calm.flags and calm.contention.others == pytest.approx(0.05)


def test_no_verdict_without_two_samples_in_the_window():
    rec = record(100.0)
    assert contention.contention_record(rec, None) is None
    assert contention.contention_record(rec, {"samples": []}) is None
    far = monitor(500.0, 0.5)  # all samples after the window
    assert contention.contention_record(rec, far) is None
    old = {"samples": [{"time": 103.0, "cpu_percent": 90.0}, {"time": 108.0}]}  # before v2
    assert contention.contention_record(rec, old) is None
    short = record(100.0, n=5)  # a 3-slice window (100.0-101.5): samples 1 s apart
    assert contention.contention_record(short, monitor(100.0, 0.5)) is None


@pytest.mark.slow
@pytest.mark.usefixtures("cpu_hogs_alone")  # its hog would slow another test's core
def test_a_run_beside_a_hog_on_its_cpu_is_flagged_busy(tmp_path):
    cpu = min(os.sched_getaffinity(0))
    hog = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
    try:
        done = subprocess.run(
            ["taskset", "-c", str(cpu), sys.executable, "-m", "milarun", "run",
             "milabench.models.polynome:main", "-o", str(tmp_path), "--",
             "--min-slices", "22"],
            cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        hog.kill()
        hog.wait()
    assert done.returncode == 0, done.stderr
    (result,) = load_all(tmp_path).values()
    diag = result["diagnostics"]["train"]
    # the hog shares the one CPU: about half of it, more if other work lands there too
    assert diag["contention"]["cpus"] == 1
    assert diag["contention"]["others"] >= 0.3, diag["contention"]
    assert "busy" in diag["flags"]
    report = milarun("report", tmp_path)
    assert report.returncode == 0, report.stderr
    text = " ".join(report.stdout.split())
    assert "the machine was busy in " in text and "its rates are not verdict-grade" in text
    assert "busy:1 (" in report.stdout  # the quality table: its busy run, others' share
