"""`doctor --active` on GPUs, through fakes at the boundary: NVML (tests/fakes.py's, readings of
a real H100) and the probe child (tests/doctor/fake_probe.py, a real process that writes what
the torch probe would). Each fault must be flagged, and a healthy node must pass."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest

from conftest import TESTS
from fakes import H100, FakeNVML
from milarun.doctor.active import probe_recorder, record
from milarun.doctor.active.run import PROBE, Setup
from milarun.doctor.active.run import run as run_active
from milarun.doctor.check import Check
from milarun.machine.gpu.nvml import NvmlBackend

FAKE_PROBE = [sys.executable, str(TESTS / "doctor" / "fake_probe.py")]
BUSY = {"utilization": [100, 60], "clock_sm": 1980, "throttle_reasons": 0x4}


class LoadedNVML(FakeNVML):
    """FakeNVML with what the active checks read besides the passive ones: both ECC counters,
    the clock event reasons, and ``ecc_rises`` errors more at each later read (a GPU that
    gets uncorrected errors under load)."""

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type):
        g = self._gpu(handle)
        if error_type == 0:
            return g.get("ecc_corrected_volatile", 0)
        g["ecc_uncorrected_volatile"] += g.get("ecc_rises", 0)
        return g["ecc_uncorrected_volatile"] - g.get("ecc_rises", 0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._reading(handle, "throttle_reasons")


def gpus(n: int, **changes_of: dict) -> list[dict]:
    """``n`` H100s (UUIDs GPU-...0, ...1), busy; ``changes_of[str(i)]`` changes GPU i."""
    found = []
    for i in range(n):
        g = {**copy.deepcopy(H100), **BUSY, "uuid": f"GPU-{i:08d}-0000-0000-0000-000000000000"}
        g["pci_bus_id"] = f"00000000:{i + 1:02X}:00.0"
        found.append({**g, **changes_of.get(str(i), {})})
    return found


def fake_setup(nvml_gpus: list[dict], faults: dict | None = None, timeout: float = 60) -> Setup:
    """Fake NVML and fake probe children; ``faults`` by GPU index, as fake_probe.py reads them."""
    faults = {nvml_gpus[int(i)]["uuid"]: f for i, f in (faults or {}).items()}
    return Setup(
        backend=NvmlBackend(LoadedNVML(nvml_gpus)),
        probe=FAKE_PROBE,
        timeout=timeout,
        environ={"FAKE_PROBE": json.dumps(faults)},
        dcgmi=None,
    )


def run(
    nvml_gpus: list[dict], faults: dict | None = None, timeout: float = 60
) -> tuple[list[Check], dict]:
    setup = fake_setup(nvml_gpus, faults, timeout)
    checks: list[Check] = []
    spec = ",".join(str(i) for i in range(len(nvml_gpus)))
    found = run_active("quick", spec, setup, lambda line: None, checks.append)
    return checks, found


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_a_healthy_node_passes_with_figures_datasheet_and_siblings():
    checks, found = run(gpus(4))
    assert {c.status for c in checks} == {"PASS", "INFO"}, [
        c for c in checks if c.status not in ("PASS", "INFO")
    ]
    assert by_name(checks)["dcgm diag -r 1"].detail.startswith("skipped: DCGM is not installed")
    line = by_name(checks)["cuda:0 gemm bf16"].detail
    assert "TFLOP/s (95% CI, 8 samples)" in line
    assert "of the H100-SXM datasheet's 989.5 TFLOP/s dense" in line
    assert "the median of the other GPUs" in line
    assert "gen5 x16" in by_name(checks)["cuda:0 host->device"].detail
    assert "node nccl" in by_name(checks) and "gpu0-1 p2p copy" in by_name(checks)
    assert "the median of the other slices" in by_name(checks)["cuda:3 cpus gemm fp32"].detail
    assert found["verdict"] == "PASS" and found["exit_code"] == 0
    assert len(found["measurements"]["cuda:3"]["gemm_bf16"]["samples"]) == 8


def test_a_gpu_at_half_gemm_speed_fails_the_sibling_test():
    checks, found = run(gpus(4), {"2": {"gemm": 0.5}})
    for precision in ("bf16", "fp16", "tf32", "fp8"):
        slow = by_name(checks)[f"cuda:2 gemm {precision}"]
        assert slow.status == "FAIL", slow
        assert "0.50x the median of the other GPUs" in slow.detail
        assert "significantly slower" in slow.detail and slow.fix
        assert by_name(checks)[f"cuda:0 gemm {precision}"].status == "PASS"
    assert found["verdict"] == "FAIL" and found["exit_code"] == 1


def test_gpus_of_another_model_are_not_siblings():
    a100 = {"name": "NVIDIA A100-SXM4-80GB"}
    checks, _ = run(gpus(3, **{"2": a100}), {"2": {"gemm": 0.4}})
    line = by_name(checks)["cuda:2 gemm bf16"]
    assert "other GPUs" not in line.detail and "A100-SXM datasheet" in line.detail
    assert "the median of the other GPUs" in by_name(checks)["cuda:0 gemm bf16"].detail


def test_a_lone_gpu_at_half_speed_is_flagged_against_its_datasheet():
    checks, _ = run(gpus(1), {"0": {"gemm": 0.5}})
    line = by_name(checks)["cuda:0 gemm bf16"]
    assert line.status == "WARN" and "% of the H100-SXM datasheet's 989.5" in line.detail
    assert 0.3 < float(line.detail.split("; ")[1].split("%")[0]) / 100 < 0.5
    assert by_name(checks)["node p2p+nccl"].detail.startswith("skipped: one GPU")


def test_a_pcie_link_at_half_width_is_flagged():
    checks, _ = run(gpus(4, **{"1": {"pcie_width": 8}}), {"1": {"link": 0.5}})
    for way in ("host->device", "device->host"):
        line = by_name(checks)[f"cuda:1 {way}"]
        assert line.status == "FAIL", line
        assert "the link trained at gen5 x8 under load (it can do gen5 x16)" in line.detail
        assert "lspci" in line.fix
        assert by_name(checks)[f"cuda:0 {way}"].status == "PASS"


def test_a_p2p_fallback_is_flagged():
    checks, found = run(gpus(4), {"0": {"no_peer": ["0-1"]}})
    for pair in ("gpu0-1", "gpu1-0"):
        line = by_name(checks)[f"{pair} p2p copy"]
        assert line.status == "FAIL" and "no peer access" in line.detail
        assert "nvidia-smi topo -m" in line.fix
    assert by_name(checks)["gpu2-3 p2p copy"].status == "PASS"
    assert by_name(checks)["node nccl"].status == "WARN"
    assert found["exit_code"] == 1


def test_a_probe_killed_by_a_signal_is_a_fail_and_keeps_what_it_measured():
    checks, _ = run(gpus(2), {"1": {"crash": "gemm_fp8", "crash_signal": "SIGILL"}})
    dead = by_name(checks)["cuda:1 probe"]
    assert dead.status == "FAIL" and "killed by SIGILL during gemm_fp8" in dead.detail
    assert by_name(checks)["cuda:1 gemm bf16"].status == "PASS"  # measured before the crash


def test_a_hung_probe_is_killed_at_its_timeout_and_fails():
    checks, found = run(gpus(2), {"0": {"hang": "memory_bandwidth"}}, timeout=4)
    hung = by_name(checks)["cuda:0 probe"]
    assert hung.status == "FAIL"
    assert "did not finish in 4 s during memory_bandwidth (killed)" in hung.detail
    assert found["exit_code"] == 1


def test_memory_errors_throttling_and_new_ecc_errors_fail():
    sick = {"throttle_reasons": 0x40 | 0x4, "ecc_rises": 2}
    checks, _ = run(gpus(2, **{"0": sick}), {"0": {"errors": 3}})
    assert by_name(checks)["cuda:0 memory test"].status == "FAIL"
    assert "3 word(s) read back wrong" in by_name(checks)["cuda:0 memory test"].detail
    clocks = by_name(checks)["cuda:0 clocks"]
    assert clocks.status == "FAIL" and "hardware thermal slowdown" in clocks.detail
    errs = by_name(checks)["cuda:0 errors"]
    assert errs.status == "FAIL" and "2 new ecc uncorrected" in errs.detail
    assert by_name(checks)["cuda:1 errors"].status == "PASS"


def test_the_record_reads_back_and_refuses_what_is_not_one(tmp_path: Path):
    _, found = run(gpus(2))
    path = record.write(tmp_path / "rec.json", found)
    assert record.read(path)["measurements"] == found["measurements"]
    with pytest.raises(Exception, match="file exists"):
        record.write(path, found)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**found, "measurements": {"cuda:0": {"x": {"samples": ["1"]}}}}))
    with pytest.raises(Exception, match=r"measurements.cuda:0.x.samples"):
        record.read(bad)


def sampled(detail: str) -> bool:
    """A real probe's figure: the quick level's 8 samples, or down to MIN_SAMPLES where the
    machine slowed the samples past 3x their planned time (probe_recorder.sample_seconds' bound:
    a run is bounded by time, never by a count)."""
    found = re.search(r"\(95% CI, (\d+) samples\)", detail)
    return found is not None and probe_recorder.MIN_SAMPLES <= int(found[1]) <= 8


@pytest.mark.slow
def test_the_real_gpu_probe_through_the_whole_path_on_a_cpu_device():
    """The real probes (torch) in place of the fake, told to use the CPU at small sizes, under
    the fake NVML of two GPUs: what they write is what the verdicts read. The GPU-only formats
    and the host link are INFO with the reason, the rest measured; the memory test finds no
    error; the node's all-reduce runs on gloo between two processes (the NCCL code path:
    spawn, rendezvous, repetitions agreed by the ranks)."""
    setup = fake_setup(gpus(2))
    setup.probe = list(PROBE)
    setup.spec = {
        "device": "cpu",
        "gemm_size": 64,
        "copy_bytes": 2**22,
        "pattern_bytes": 2**23,
        "backend": "gloo",
        "ranks": 2,
        "nccl_bytes": 2**20,
    }
    setup.cpu_slices = False
    checks: list[Check] = []
    found = run_active("quick", "0,1", setup, lambda line: None, checks.append)
    lines = by_name(checks)
    assert "cuda:0 probe" not in lines  # it finished
    assert sampled(lines["cuda:0 gemm bf16"].detail)
    assert (
        lines["cuda:0 gemm fp8"].status == "INFO"
        and "tensor-core" in lines["cuda:0 gemm fp8"].detail
    )
    assert lines["cuda:0 host link"].detail.startswith("skipped: no host link")
    memory = lines["cuda:0 memory test"]
    assert memory.status == "PASS" and memory.detail.startswith(
        "0 word(s) read back wrong over 8 MiB"
    )
    assert "5 pattern passes" in memory.detail
    copies = found["measurements"]["cuda:0"]["memory_bandwidth"]["samples"]
    assert probe_recorder.MIN_SAMPLES <= len(copies) <= 8
    nccl = lines["node nccl"]
    assert nccl.status == "PASS" and "all-reduce bus bandwidth over 2 GPUs, 1 MiB" in nccl.detail
    assert sampled(nccl.detail)
