"""`doctor --active`'s fixes name the tools of the GPUs' vendor (the backend's Tools): the same
faults on three H100s (NVML's fake, tests/fakes.py) and on three MI300X (amdsmi's fake,
tests/fakes_amdsmi.py) give the same checks, each fix with nvidia-smi's or amd-smi's command
for that GPU, and the node's collective check named after NCCL or RCCL."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import TESTS
from doctor.test_active_gpu import LoadedNVML, gpus
from fakes_amdsmi import fake_amdsmi, mi300x
from milarun.doctor.active import judge, judge_node
from milarun.doctor.active.run import Setup
from milarun.doctor.active.run import run as run_active
from milarun.machine import gpu
from milarun.machine.gpu.amd import AmdSmiBackend
from milarun.machine.gpu.base import SW_THERMAL
from milarun.machine.gpu.nvml import NvmlBackend

FAKE_PROBE = [sys.executable, str(TESTS / "doctor" / "fake_probe.py")]
# GPU 1 at half its GEMM speed, GPU 2's probe killed, GPUs 0 and 1 without peer access
FAULTS = {
    "1": {"gemm": 0.5},
    "2": {"crash": "memory_bandwidth", "crash_signal": "SIGILL"},
    "0": {"no_peer": ["0-1"]},
}


def nvidia() -> tuple[gpu.Backend, dict[str, str]]:
    found = gpus(3, **{"0": {"throttle_reasons": 0x4 | SW_THERMAL}})
    # the fake probe knows a GPU by its CUDA_VISIBLE_DEVICES entry: NVML's UUID here
    return NvmlBackend(LoadedNVML(found)), {i: found[int(i)]["uuid"] for i in FAULTS}


def amd() -> tuple[gpu.Backend, dict[str, str]]:
    found = []
    for i in range(3):
        g = mi300x(i, ppt=lambda t: False)
        g["activity"]["gfx_activity"] = 100
        g["clock_info_gfx"]["clk"] = 2100
        g["violation_status"]["active_socket_thrm"] = i == 0  # running hot
        found.append(g)
    return AmdSmiBackend(fake_amdsmi(found)), {i: i for i in FAULTS}  # by index


VENDORS = {
    "nvidia": (
        nvidia,
        {
            "performance": "`nvidia-smi -q -d PERFORMANCE,CLOCK -i 1`",
            "reset": "`sudo nvidia-smi -i 1 -r`",
            "query": "`nvidia-smi -q -i 2`",
            "kernel_log": "`dmesg | grep -i xid`",
            "topology": "`nvidia-smi topo -m`",
            "collective": "node nccl",
            "other": "amd-smi",
        },
    ),
    "amd": (
        amd,
        {
            "performance": "`amd-smi metric -g 1 --clock --power --temperature`",
            "reset": "`sudo amd-smi reset -G -g 1`",
            "query": "`amd-smi metric -g 2`",
            "kernel_log": "`dmesg | grep -i amdgpu`",
            "topology": "`amd-smi topology`",
            "collective": "node rccl",
            "other": "nvidia",
        },
    ),
}


@pytest.mark.parametrize("vendor", VENDORS)
def test_each_fix_names_the_vendors_tool_for_that_gpu(vendor):
    make, said = VENDORS[vendor]
    backend, ids = make()
    setup = Setup(
        backend=backend,
        probe=FAKE_PROBE,
        timeout=60,
        environ={"FAKE_PROBE": json.dumps({ids[i]: f for i, f in FAULTS.items()})},
        dcgmi=None,
    )
    checks: list = []
    found = run_active("quick", "0,1,2", setup, lambda line: None, checks.append)
    by_name = {c.name: c for c in checks}
    slow = by_name["cuda:1 gemm bf16"]
    assert slow.status == "FAIL" and said["performance"] in slow.fix and said["reset"] in slow.fix
    dead = by_name["cuda:2 probe"]
    assert dead.status == "FAIL" and "killed by SIGILL during memory_bandwidth" in dead.detail
    assert said["query"] in dead.fix and said["kernel_log"] in dead.fix
    assert said["reset"].replace(" 1", " 2") in dead.fix
    hot = by_name["cuda:0 clocks"]
    # a thermal slowdown FAILs, as the tender's throttle rule fails it (results.throttle)
    assert hot.status == "FAIL" and "thermal slowdown" in hot.detail
    assert said["performance"].replace(" 1", " 0") in hot.fix
    pair = by_name["gpu0-1 p2p copy"]
    assert pair.status == "FAIL" and "no peer access" in pair.detail
    assert pair.fix.startswith(said["topology"])
    collective = by_name[said["collective"]]
    assert collective.status == "WARN" and said["topology"] in collective.fix
    # nothing of the other vendor's tools, in any line
    for check in checks:
        assert said["other"] not in f"{check.detail} {check.fix}", check
    assert found["verdict"] == "FAIL"


def test_one_gpu_skips_the_node_check_naming_its_vendors_library():
    amd_tools = AmdSmiBackend(fake_amdsmi([])).tools
    (line,) = judge_node.skipped(1, amd_tools)
    assert line.name == "node p2p+rccl"
    assert (
        line.detail
        == "skipped: one GPU on this node: RCCL all-reduce and peer-to-peer copies need two"
    )
    (line,) = judge_node.skipped(1, NvmlBackend(LoadedNVML([])).tools)
    assert line.name == "node p2p+nccl" and "NCCL all-reduce" in line.detail


def test_where_no_library_answers_the_fixes_name_both_vendors_tools():
    plain = gpu.plain("NVML unavailable: no driver")
    assert plain.reset_command(3) == (
        "the vendor's tool (`sudo nvidia-smi -i 3 -r`, `sudo amd-smi reset -G -g 3`)"
    )
    probed = judge.Probed("cuda:3", "gpu", {"phases": {}, "done": False}, 1, tools=plain.tools)
    fix = judge.probe_check(probed).fix  # type: ignore[union-attr]
    assert "`nvidia-smi -q -i 3`, `amd-smi metric -g 3`" in fix
