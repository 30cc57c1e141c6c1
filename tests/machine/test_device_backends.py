"""The device interface (milarun.machine.gpu) and its backends, each through a fake of
its library at the boundary: NVML (tests/fakes.py, a real H100's readings), AMD SMI
(tests/fakes_amdsmi.py, amdsmi's documented return shapes, injected as ``sys.modules
["amdsmi"]``), and the plain backend of a machine where neither answers (this one)."""

from __future__ import annotations

import ast
import json
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT, TESTS, milarun
from fakes import H100, FakeNVML, PoweredNVML, no_nvml
from fakes_amdsmi import fake_amdsmi, mi300x
from milarun import errors
from milarun.doctor.active.run import Setup
from milarun.doctor.active.run import run as run_active
from milarun.doctor.passive.checks import Machine, Request, run_checks
from milarun.machine import devices, gpu, gpuids, monitors, sysinfo
from milarun.machine.devices import parse_device_spec
from milarun.machine.gpu import power
from milarun.machine.gpu.amd import AmdSmiBackend
from milarun.machine.gpu.base import POWER_CAP, GpuInfo
from milarun.machine.gpu.nvml import NvmlBackend
from milarun.machine.gpuprobe import TorchGPUs
from milarun.measure import energy
from milarun.results.records import RateRecord
from resultfactory import rate_series, result, write

MILARUN = ROOT / "milarun"
# Each vendor library, the one module that may use it, and the way its calls are spelled.
VENDORS = {
    "pynvml": ("milarun/machine/gpu/nvml.py", r"\bnvml[A-Z]\w*\("),
    "amdsmi": ("milarun/machine/gpu/amd.py", r"\bamdsmi_\w+\("),
}


def vendor_uses(root: Path) -> list[str]:
    """Every import of a vendor library, and every call of its API, outside its backend."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            for name in names:
                owner = VENDORS.get(name.split(".")[0])
                if owner and owner[0] != rel:
                    found.append(f"{rel} imports {name}")
        for owner, call in VENDORS.values():
            if owner != rel and re.search(call, source):
                found.append(f"{rel} calls {re.search(call, source).group(0)}")  # type: ignore[union-attr]
    return found


def test_no_vendor_library_outside_its_backend():
    assert vendor_uses(MILARUN) == []


def test_the_vendor_check_names_a_planted_use(tmp_path):
    copy = tmp_path / "milarun"
    (copy / "machine" / "gpu").mkdir(parents=True)
    (copy / "machine" / "gpu" / "nvml.py").write_text("import pynvml\npynvml.nvmlInit()\n")
    (copy / "report.py").write_text("def f(lib):\n    return lib.nvmlDeviceGetCount()\n")
    (copy / "doctor.py").write_text("from amdsmi import amdsmi_init\n")
    assert vendor_uses(copy) == [
        "milarun/doctor.py imports amdsmi",
        "milarun/report.py calls nvmlDeviceGetCount(",
    ]


# -- choosing the backend --------------------------------------------------------------------
def test_amd_smi_answers_where_nvml_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", no_nvml())
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi([mi300x(0), mi300x(1)]))
    backend = gpu.load()
    assert isinstance(backend, AmdSmiBackend) and backend.usable
    first = backend.gpus()[0]
    assert first == GpuInfo(
        0,
        "AMD Instinct MI300X",
        mi300x(0)["uuid"],
        "00000000:0C:00.0",
        196592 * 2**20,
        None,
        "0x74a1",
    )
    assert backend.driver() == "6.10.5" and backend.firmware(first.handle).startswith("022.")
    record = sysinfo.system_record()
    assert record["gpu_backend"] == "amdsmi" and record["driver"] == "6.10.5"
    assert [g["name"] for g in record["gpus"]] == ["AMD Instinct MI300X"] * 2
    assert [g["pci_device_id"] for g in record["gpus"]] == ["0x74a1"] * 2  # asic_info's


def test_nvml_reads_the_pci_device_id_into_the_inventory():
    """NVML's pciDeviceId (device << 16 | vendor 0x10de) is the inventory's 0x2330, the
    H100 SXM5's; a driver that gives none leaves it None (the plain backend lists nothing)."""
    (first,) = NvmlBackend(FakeNVML([{**H100, "pci_id": 0x233010DE}])).gpus()
    assert first.pci_device_id == "0x2330"
    assert NvmlBackend(FakeNVML([H100])).gpus()[0].pci_device_id is None


def test_the_energy_record_carries_the_datasheet_board_power_beside_the_limit(monkeypatch):
    """The MI300X's datasheet board power (750 W) and the limit AMD SMI reads (its
    power_cap, uW) per GPU, summed in the energy record; a GPU not found: neither."""
    monkeypatch.setitem(sys.modules, "pynvml", no_nvml())
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi([mi300x(0), mi300x(1)]))
    found = power.board_power(["0", "1", "7"])
    assert [(p.board_power_w, p.power_limit_w) for p in found[:2]] == [(750.0, 750.0)] * 2
    assert found[2] == power.BoardPower(None, None, None)
    measured = energy.Energy(joules=1000.0, seconds=1.0, watts=1000.0)
    record = energy.with_board_power(
        measured, [(p.board_power_w, p.power_limit_w) for p in found[:2]]
    )
    assert record.to_dict()["board_power_w"] == 1500.0 and record.power_limit_w == 1500.0
    unknown = energy.with_board_power(measured, [(p.board_power_w, p.power_limit_w) for p in found])
    assert "board_power_w" not in unknown.to_dict() and unknown.power_limit_w is None


def test_the_plain_backend_says_why_where_no_library_answers(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: not installed
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    backend = gpu.load()
    assert not backend.usable and backend.name == "plain" and backend.gpus() == []
    assert backend.reason.startswith("nvidia-ml-py not installed")
    assert sysinfo.system_record()["note"] == backend.reason
    record = monitors.gpu_monitor(ids=["0"], interval=0.05).start().stop()
    assert record["samples"] == [] and record["backend"] == "plain"
    assert record["note"] == f"no samples: {backend.reason}"
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi([], init_error="8 driver not loaded"))
    assert "; AMD SMI unavailable: Error code" in gpu.load().reason


# -- AMD SMI's readings ----------------------------------------------------------------------
def amd(*gpus: dict) -> AmdSmiBackend:
    return AmdSmiBackend(fake_amdsmi(list(gpus)))


def test_the_amd_monitor_reads_power_energy_clocks_and_the_power_limit():
    busy = mi300x(watts=lambda t: 720.0, ppt=lambda t: True)
    busy["activity"]["gfx_activity"] = 100
    mon = monitors.gpu_monitor(backend=amd(busy), ids=["0"], interval=0.05).start()
    time.sleep(0.3)
    record = mon.stop()
    assert record["backend"] == "amdsmi" and len(record["samples"]) >= 2
    first, last = (s["gpus"]["0"] for s in (record["samples"][0], record["samples"][-1]))
    assert first["power"] == 720 and first["temperature"] == 41 and first["load"] == 1.0
    assert first["sm_clock"] == 132 and first["memory"] == [283, 196592]
    assert first["clock_events"] == POWER_CAP  # PPT enforced: the power limit, no fault
    inventory = record["inventory"]["0"]  # AMD SMI's asic_info device id, its market name
    assert inventory["pci_device_id"] == "0x74a1" and inventory["name"] == "AMD Instinct MI300X"
    assert inventory["memory_mb"] == 196592 and inventory["uuid"] == busy["uuid"]
    spent = record["samples"][-1]["time"] - record["samples"][0]["time"]
    assert last["energy"] - first["energy"] == pytest.approx(720.0 * spent, rel=0.05)


def test_a_reading_amd_smi_does_not_give_is_not_measured_never_zero():
    bare = mi300x()
    del bare["energy_count"]
    bare["power_info"] = dict.fromkeys(bare["power_info"], "N/A")
    bare["violation_status"] = dict.fromkeys(bare["violation_status"], "N/A")
    backend = amd(bare)
    found = backend.reader(backend.handle("0"), True)()
    assert found["power"] is None and found["energy"] is None
    assert found["clock_events"] is None and found["temperature"] == 41
    samples = [{"time": t, "gpus": {"0": found}} for t in (0.0, 10.0)]
    ends = (2.0, 4.0, 6.0, 8.0)
    rates = RateRecord(None, 0.0, 0.0, 0, None, 0, 0, 2.0, None, (1.0,) * 4, slice_ends=ends)
    measured = energy.energy_record(
        "cuda:0", {"train": rates}, {"samples": samples, "backend": "amdsmi"}
    )
    assert measured.joules is None and measured.watts is None and measured.backend == "amdsmi"
    assert "no energy counter or power samples" in (measured.reason or "")


def test_amd_energy_and_throttle_over_the_steady_window():
    """The steady window's energy from AMD SMI's counter, and its slices at the power
    limit, as the runner records them (measure.energy)."""
    busy = mi300x(watts=lambda t: 700.0, ppt=lambda t: True)
    mon = monitors.gpu_monitor(backend=amd(busy), ids=["0"], interval=0.05).start()
    start = time.time() + 0.1
    time.sleep(1.0)
    # 24 slices of 0.5 s of in-block time closing 0.03 s apart: a steady window of 18
    ends = tuple(start + 0.03 * k for k in range(1, 25))
    record = mon.stop()
    rates = RateRecord(None, 0.0, 0.0, 0, None, 0, 0, 0.5, None, (10.0,) * 24, slice_ends=ends)
    found = energy.energy_record("cuda:0", {"train": rates}, record)
    assert found.method == "counter" and found.backend == "amdsmi"
    assert found.watts == pytest.approx(700.0, rel=0.05)
    throttled = energy.throttle_record(rates, record)
    assert throttled is not None and throttled.fault_slices == 0
    assert throttled.power_limit_slices == throttled.window_slices


# -- ROCm's visible-devices variables ------------------------------------------------------
def test_rocm_visible_devices_number_the_gpus_they_leave():
    env = {"ROCR_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "1"}
    assert devices.visible_ids(env) == ["3"]
    assert devices.visible_ids({"HIP_VISIBLE_DEVICES": "0,2"}) == ["0", "2"]
    assert devices.visible_ids({**env, "CUDA_VISIBLE_DEVICES": "0"}) == ["3"]
    assert devices.visible_ids({"CUDA_VISIBLE_DEVICES": "GPU-a,1"}) == ["GPU-a", "1"]
    assert devices.visible_ids({}) is None


def test_jobs_gives_amd_gpus_by_index_without_the_operators_rocm_variables(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1,2")
    backend = amd(*(mi300x(i) for i in range(4)))
    devs = gpuids.resolve_gpus(devices.discover_devices(backend), backend)
    assert [(d.id, d.uuid, d.pci_bus_id) for d in devs] == [
        ("1", None, "0000:1c:00.0"),
        ("2", None, "0000:2c:00.0"),
    ]
    env = devices.launch_environ(devs[:1])
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and "HIP_VISIBLE_DEVICES" not in env
    with pytest.raises(errors.DeviceSpecError, match=r"AMD SMI sees 4 GPU\(s\).*amd-smi list"):
        gpuids.resolve_gpus(parse_device_spec("7"), backend)


# -- doctor, passive and active, on a faked MI300X against an H100 ---------------------------
TORCH = {"torch": "2.11.0", "cudnn": None}


def doctor(backend: gpu.Backend, torch: TorchGPUs, tmp_path: Path) -> dict[str, tuple]:
    machine = Machine(
        backend=backend,
        torch=lambda: torch,
        dev=tmp_path,
        hierarchies=dict,
        disk_usage=lambda path: SimpleNamespace(free=10**12),
        packages=(),
    )
    checks = run_checks(Request(tmp_path / "data"), machine)
    return {c.name: (c.status, c.detail) for c in checks}


def test_doctor_on_an_mi300x_gives_the_h100s_checks_with_amds_figures(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    h100 = doctor(
        NvmlBackend(FakeNVML([H100])),
        TorchGPUs(
            ({"index": 0, "name": H100["name"], "memory": H100["memory"], "uuid": H100["uuid"]},),
            {**TORCH, "cuda": "13.0", "nccl": "2.28.9", "cudnn": 91900},
        ),
        tmp_path,
    )
    gpu = mi300x()
    mi = doctor(
        amd(gpu),
        TorchGPUs(
            (
                {
                    "index": 0,
                    "name": "AMD Instinct MI300X",
                    "memory": 196592 * 2**20,
                    "uuid": "",
                    "pci_bus_id": "00000000:0C:00.0",
                },
            ),
            {**TORCH, "cuda": None, "hip": "6.4.43482", "nccl": "2.21.5"},
        ),
        tmp_path,
    )
    nvidia_only = {"gpu0 persistence", "gpu0 MIG", "gpu0 pending pages"}
    assert set(h100) - nvidia_only <= set(mi) and set(mi) - set(h100) == {"gpu0 GPU links"}
    for name in (
        "GPUs",
        "versions",
        "gpu0",
        "gpu0 memory errors",
        "gpu0 clocks",
        "gpu0 power",
        "gpu0 PCIe",
        "gpu0 temperature",
    ):
        assert mi[name][0] == "PASS" == h100[name][0], (name, mi[name], h100[name])
    assert mi["GPUs"][1] == (
        "AMD SMI and torch see the same 1 GPU (by UUID and PCI bus): AMD Instinct MI300X"
    )
    assert mi["versions"][1] == ("amdgpu driver 6.10.5; torch 2.11.0: HIP 6.4.43482, RCCL 2.21.5")
    assert mi["gpu0 power"][1] == "limit 750 W, default 750 W"
    assert mi["gpu0 clocks"][1].startswith("GFX 132 MHz now, max 2100 MHz")
    assert mi["gpu0 PCIe"][1] == "gen 5 x16 (max gen 5 x16)"
    assert mi["gpu0 temperature"][1] == "41 C (slows down at 110 C)"
    assert mi["gpu0 memory errors"][1] == "ECC on, no uncorrected error since the driver loaded"
    assert mi["gpu0 GPU links"] == ("INFO", "XGMI width 16 at 32 GB/s")


FAKE_PROBE = [sys.executable, str(TESTS / "doctor" / "fake_probe.py")]


def test_doctor_active_on_two_mi300x_judges_them_on_amds_datasheet():
    busy = []
    for i in range(2):
        g = mi300x(i, ppt=lambda t: False)
        g["activity"]["gfx_activity"] = 100
        g["clock_info_gfx"]["clk"] = 2100
        busy.append(g)
    setup = Setup(
        backend=amd(*busy),
        probe=FAKE_PROBE,
        timeout=60,
        # the fake probe gives an H100's figures: an MI300X copies memory faster
        environ={"FAKE_PROBE": json.dumps({str(i): {"memory": 1.5} for i in range(2)})},
        dcgmi=None,
    )
    checks: list = []
    found = run_active("quick", "0,1", setup, lambda line: None, checks.append)
    by_name = {c.name: c for c in checks}
    assert {c.status for c in checks} == {"PASS", "INFO"}, [
        c for c in checks if c.status not in ("PASS", "INFO")
    ]
    assert "of the MI300X datasheet's 1,307 TFLOP/s dense" in by_name["cuda:0 gemm bf16"].detail
    assert "of the MI300X datasheet's 5,300 GB/s" in by_name["cuda:1 memory copy"].detail
    assert "gen5 x16" in by_name["cuda:0 host->device"].detail
    assert "SM clock median 2100 MHz of 2100 MHz max" in by_name["cuda:0 clocks"].detail
    errors_line = by_name["cuda:0 errors"].detail
    assert "ecc uncorrected 0->0" in errors_line and "AMD SMI's events are not read" in errors_line
    assert "node rccl" in by_name and found["verdict"] == "PASS"


# -- the report of a faked MI300X machine against an H100's ---------------------------------
def measured_result(backend: gpu.Backend, rate: float) -> dict:
    """A result of one test on cuda:0 whose energy the backend's monitor measured and whose
    system record the backend listed."""
    mon = monitors.gpu_monitor(backend=backend, ids=["0"], interval=0.05).start()
    start = time.time() + 0.1
    time.sleep(1.0)
    rates = rate_series(rate)
    ends = tuple(start + 0.03 * k for k in range(1, len(rates) + 1))
    record = mon.stop()
    train = RateRecord(None, 0.0, 0.0, 0, None, 0, 0, 0.5, None, tuple(rates), slice_ends=ends)
    found = energy.energy_record("cuda:0", {"train": train}, record)
    assert found.examples_per_joule, found
    system = sysinfo.system_record(backend)
    if backend.vendor == "amd":  # what a ROCm build of torch records in place of CUDA's
        system.update(cuda=None, cudnn=None, hip="6.4.43482")
    return result(
        "modern.gemm",
        "0.0",
        rate,
        device="cuda:0",
        system=system,
        energy=found.to_dict(),
        gpu_monitor={"samples": [], "backend": backend.name},
    )


def sections(text: str) -> list[str]:
    lines = text.splitlines()
    return [a for a, b in zip(lines, lines[1:]) if b and set(b) == {"-"} and len(b) == len(a)]


def test_the_report_of_an_mi300x_has_the_h100s_sections_with_amds_figures(tmp_path):
    folders = {}
    made = {
        "h100": (NvmlBackend(PoweredNVML([H100], 690.0)), 600.0),
        "mi300x": (amd(mi300x(watts=lambda t: 720.0, ppt=lambda t: True)), 800.0),
    }
    for name, (backend, rate) in made.items():
        folders[name] = tmp_path / name
        write(folders[name], measured_result(backend, rate))
    texts = {}
    for name, folder in folders.items():
        done = milarun("report", folder, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        texts[name] = done.stdout
    assert sections(texts["mi300x"]) == sections(texts["h100"])
    assert any(s.startswith("Energy over the steady window") for s in sections(texts["mi300x"]))
    mi = texts["mi300x"]
    assert "AMD Instinct MI300X, 192 GiB" in mi and re.search(r"GPU driver: +6\.10\.5", mi)
    assert re.search(r"GPU backend: +amdsmi", mi) and re.search(r"ROCm \(HIP\): +6\.4", mi)
    assert re.search(r"modern\.gemm\s+1\s+7[12]\d\b", mi), mi  # ~720 W from AMD SMI's counter
    assert "NVIDIA H100 80GB HBM3" in texts["h100"] and "NVIDIA" not in mi
