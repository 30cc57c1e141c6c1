"""The collectives verdict of `doctor --active` (issue 51): the all-reduce judged against the
bus bandwidth a healthy node of its GPU reaches on the path NCCL chose (NVLink SHARP or not,
milarun.machine.gpu.datasheet), naming the algorithm and protocol and where it plateaus;
through the fake probe and fake NVML of 8 H100s, and NCCL's log lines parsed."""

from __future__ import annotations

import pytest
from test_active_gpu import fake_setup, gpus

from milarun.doctor.active import node
from milarun.doctor.active.run import run as run_active
from milarun.doctor.check import Check
from milarun.machine.gpu import datasheet


def nccl_check(faults: dict | None = None) -> Check:
    checks: list[Check] = []
    setup = fake_setup(gpus(8), faults)
    setup.cpu_slices = False
    run_active("quick", ",".join(map(str, range(8))), setup, lambda line: None, checks.append)
    return {c.name: c for c in checks}["node nccl"]


def test_a_ring_at_360_is_healthy_and_named():
    line = nccl_check()
    assert line.status == "PASS", line
    assert "algorithm RING, protocol LL128 (log)" in line.detail
    assert "plateaus from 32 MiB" in line.detail
    assert "of the 370 GB/s a healthy 8-GPU H100-SXM node reaches over NVLink without SHARP" in (
        line.detail
    )


@pytest.mark.parametrize(
    "algorithms, busbw, status",
    [
        (["NVLS"], 470.0, "PASS"),  # 98% of 480
        (["NVLS"], 360.0, "WARN"),  # what a ring reaches: 75% of NVLS's 480
        (["NVLS_TREE"], 300.0, "FAIL"),  # 62%
        (["RING"], 200.0, "FAIL"),  # 54% of 370
    ],
)
def test_the_bound_follows_the_algorithm(algorithms, busbw, status):
    line = nccl_check({"0": {"nccl": {"algorithms": algorithms, "busbw": busbw}}})
    assert line.status == status, line
    assert f"algorithm {algorithms[0]}, protocol SIMPLE" in line.detail
    if algorithms[0].startswith("NVLS"):
        assert "480 GB/s" in line.detail and "with NVLink SHARP" in line.detail
    if status != "PASS":
        assert line.fix


def test_an_algorithm_not_logged_is_said_and_judged_without_sharp():
    line = nccl_check({"0": {"nccl": {"algorithms": []}}})
    assert "algorithm not in NCCL's log: judged as ring/tree over NVLink" in line.detail
    assert "(NVLS was available)" in line.detail and "370 GB/s" in line.detail


def test_nccl_log_lines_and_the_plateau():
    text = (
        "cn1:1:1 [0] NCCL INFO NVLS multicast support is available on dev 0\n"
        "cn1:1:1 [0] NCCL INFO AllReduce: 268435456 Bytes -> Algo NVLS proto SIMPLE time 600\n"
        "cn1:1:1 [0] NCCL INFO AllReduce: 4096 Bytes -> algorithm RING protocol LL\n"
    )
    pairs, nvls = node.chosen(text)
    assert pairs == {("NVLS", "SIMPLE"), ("RING", "LL")} and nvls
    assert node.chosen("NCCL INFO Channel 00/24 : 0 1 2 3") == (set(), False)
    sweep = {2**20: [10.0], 2**23: [96.0, 97.0], 2**26: [100.0]}
    assert node.plateau(sweep) == 2**23
    assert node.sweep_sizes(2**28, "quick") == [2**22, 2**25, 2**28]


def test_the_datasheet_bounds():
    assert datasheet.allreduce_busbw("NVIDIA H100 80GB HBM3", "nvls") == 480e9
    assert datasheet.allreduce_busbw("NVIDIA H200", "nvls") == 475e9
    assert datasheet.allreduce_busbw("NVIDIA H200", "nvlink") == 370e9
    assert datasheet.allreduce_busbw("NVIDIA A100-SXM4-80GB", "nvls") is None
    assert datasheet.collective_topology("nvls_tree") == "nvls"
    assert datasheet.collective_topology(None) == "nvlink"
    assert datasheet.across_nodes_busbw(8) == 8 * 48e9
