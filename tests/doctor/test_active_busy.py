"""`doctor --active` on a busy machine (issue 49): a GPU's figures measured while other processes
took its probes' CPUs, or ran on the GPU (NVML's compute processes, through the fake NVML),
are shown and not judged: WARN "not verdict-grade: the machine was busy", the rule of the CPU
slices (tests/doctor/test_active_cpu.py) and the report's busy flag. The CPU load is real:
real busy loops beside the (fake) probe children."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_active_gpu import by_name, gpus, run

from milarun.doctor.active import busy

BUSY = "meanwhile: not verdict-grade, the machine was busy"
MEASURED = ("gemm bf16", "gemm fp8", "memory copy", "host->device", "device->host")


def test_another_process_on_a_gpu_makes_its_figures_no_verdict():
    """GPU 1 lists a process besides its probe: its figures WARN, its load line names
    `nvidia-smi`; GPU 0, alone on its GPU, keeps its verdicts; a backend that lists no
    processes says so, and is no reason to withhold one."""
    checks, found = run(gpus(3, **{"0": {"processes": []}, "1": {"processes": [4242, 4343]}}))
    lines = by_name(checks)
    for title in MEASURED:
        taken = lines[f"cuda:1 {title}"]
        assert taken.status == "WARN" and f"1 other process ran on the GPU {BUSY}" in taken.detail
        assert lines[f"cuda:0 {title}"].status == "PASS", lines[f"cuda:0 {title}"]
        assert lines[f"cuda:2 {title}"].status == "PASS", lines[f"cuda:2 {title}"]
    assert lines["cuda:1 memory test"].status == "PASS"  # a correctness test, not a figure
    load = lines["cuda:1 load"]
    assert load.status == "WARN" and "1 other process on the GPU (NVML)" in load.detail
    assert "`nvidia-smi` lists the GPU's processes" in str(load.fix)
    assert lines["cuda:0 load"].status == "PASS"
    assert "no other processes on the GPU (NVML)" in lines["cuda:0 load"].detail
    # the fake probes take a fraction of a second: no CPU share over so short a span
    assert "not measured (under 2 s)" in lines["cuda:0 load"].detail
    unlisted = lines["cuda:2 load"]
    assert unlisted.status == "INFO", unlisted
    assert "NVML does not list the GPU's processes here: others on it unknown" in unlisted.detail
    assert found["verdict"] == "WARN" and found["exit_code"] == 0


def test_the_probe_itself_is_not_another_process():
    """Where a listing holds the probe's pid, the others are the rest; where none does (a
    container's pids are the host's), one listed process is the probe's."""
    seen = [{"processes": [10]}, {"processes": [10, 11, 12]}, {"processes": None}]
    assert busy.gpu_others(seen, 10) == 2
    assert busy.gpu_others([{"processes": [77, 78]}], 10) == 1
    assert busy.gpu_others([{"processes": []}, {"processes": [77]}], None) == 0
    assert busy.gpu_others([{"processes": None}, {}], 10) is None


@pytest.mark.parametrize(("share", "status"), [(0.62, "WARN"), (0.1, "PASS"), (None, "PASS")])
def test_the_gpus_cpu_rule_is_the_reports_busy_flag(share, status):
    """From a quarter of the probes' CPUs taken (the report's busy threshold), as for a CPU
    slice: the figure stays, the verdict goes."""
    from milarun.doctor.check import Check

    line = Check("cuda:0 gemm bf16", "PASS", "700 TFLOP/s")
    marked = busy.not_verdict_grade(line, busy.gpu_took(share, 0))
    assert marked.status == status
    assert ("other processes took 62% of its CPUs " + BUSY in marked.detail) == (status == "WARN")
    assert marked.detail.startswith("700 TFLOP/s")


@pytest.mark.slow  # seconds of real busy loops
@pytest.mark.xdist_group(name="cpu_slices")
@pytest.mark.usefixtures("cpu_hogs_alone")  # its loops would slow another test's CPUs
def test_gpu_figures_measured_beside_cpu_hogs_are_no_verdict():
    """A busy loop on each of the probes' CPUs while the (fake) GPU probes run 3 s: others took
    a quarter or more of their CPUs, and every GPU's figures WARN as not verdict-grade."""
    cpus = sorted(os.sched_getaffinity(0))
    hogs = []
    try:
        for cpu in cpus:
            hog = subprocess.Popen(
                [sys.executable, "-c", "while True: pass"], start_new_session=True
            )
            os.sched_setaffinity(hog.pid, {cpu})
            hogs.append(hog)
        checks, found = run(gpus(2), {"0": {"seconds": 3}, "1": {"seconds": 3}})
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    lines = by_name(checks)
    for gpu in ("cuda:0", "cuda:1"):
        for title in MEASURED:
            line = lines[f"{gpu} {title}"]
            assert line.status == "WARN" and BUSY in line.detail, line
            assert "other processes took" in line.detail and "% of its CPUs" in line.detail
        assert lines[f"{gpu} load"].status == "WARN", lines[f"{gpu} load"]
        assert found["units"][gpu]["others"] >= busy.BUSY_LIMIT
