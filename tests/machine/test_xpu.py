"""Intel GPUs, at the least (issue 41): an instance trains on torch.xpu where torch has no
CUDA or ROCm GPU, seeing only its own GPU through ZE_AFFINITY_MASK, which its result records;
the machine has no backend (no maintained Python binding of xpu-smi or Level Zero sysman is
in milarun's dependencies), and the plain backend says so. Through a fake at the torch
boundary (torch.xpu monkeypatched) and a fake PCI bus in sysfs: no Intel GPU ran here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from milarun.errors import GPUDiscoveryError
from milarun.machine import devices, gpu, monitors, sysinfo, torchdevice
from milarun.machine.gpuprobe import TorchGPUs
from milarun.results import records


@pytest.fixture
def xpu_machine(monkeypatch):
    """torch with no CUDA GPU and two Intel GPUs; ZE_AFFINITY_MASK is asked for when
    torch.xpu first looks (Level Zero reads it once, when it initialises)."""
    torch = pytest.importorskip("torch")
    for var in ("CUDA_VISIBLE_DEVICES", "MILARUN_DEVICE", "LOCAL_RANK", torchdevice.XPU_VISIBLE):
        monkeypatch.setenv(var, "")  # so that teardown removes what torch_device sets
        monkeypatch.delenv(var)
    seen: list[str | None] = []

    def available() -> bool:
        seen.append(os.environ.get(torchdevice.XPU_VISIBLE))
        return True

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.xpu, "is_available", available)
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 1)
    return torch, seen


def test_an_instance_trains_on_its_own_intel_gpu(xpu_machine, monkeypatch):
    torch, seen = xpu_machine
    monkeypatch.setenv("MILARUN_DEVICE", "cuda:3")  # as `jobs` gives GPU 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert torchdevice.torch_device() == torch.device("xpu", 0)
    assert seen == ["3"]  # the mask was set before torch.xpu looked
    assert records.recorded_environ(os.environ)["ZE_AFFINITY_MASK"] == "3"
    assert torchdevice.synchronizer(torch.device("xpu", 0)) is not None


def test_the_operators_own_mask_is_kept(xpu_machine, monkeypatch):
    torch, seen = xpu_machine
    monkeypatch.setenv("MILARUN_DEVICE", "cuda:0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("ZE_AFFINITY_MASK", "1.0")  # a tile of GPU 1
    assert torchdevice.torch_device() == torch.device("xpu", 0) and seen == ["1.0"]


def test_without_an_intel_gpu_a_gpu_instance_still_refuses_the_cpu(xpu_machine, monkeypatch):
    torch, _ = xpu_machine
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    monkeypatch.setenv("MILARUN_DEVICE", "cuda:0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(RuntimeError, match="torch sees no GPU"):
        torchdevice.torch_device()


def pci_bus(root: Path, *functions: tuple[str, str, str]) -> Path:
    """A /sys/bus/pci/devices of (address, vendor, class) functions."""
    for address, vendor, kind in functions:
        (root / address).mkdir(parents=True)
        (root / address / "vendor").write_text(vendor + "\n")
        (root / address / "class").write_text(kind + "\n")
    return root


def test_the_plain_backend_says_why_intel_gpus_are_not_measured(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    bus = pci_bus(
        tmp_path / "pci",
        ("0000:00:00.0", "0x8086", "0x060000"),  # an Intel host bridge: no GPU
        ("0000:3a:00.0", "0x8086", "0x038000"),  # a Data Center GPU Max
        ("0000:9a:00.0", "0x8086", "0x038000"),
    )
    backend = gpu.load(bus)
    assert not backend.usable and backend.name == "plain"
    assert backend.reason.endswith(
        "; Intel GPU(s) at 0000:3a:00.0, 0000:9a:00.0: no maintained Python binding of xpu-smi "
        "or Level Zero sysman is in milarun's dependencies: their power, energy, clocks and "
        "health are not measured"
    )
    assert sysinfo.system_record(backend)["note"] == backend.reason
    record = monitors.gpu_monitor(backend=backend, ids=["0"]).start().stop()
    assert record["samples"] == [] and record["note"] == f"no samples: {backend.reason}"
    assert "Intel" not in gpu.load(pci_bus(tmp_path / "cpu-only")).reason


def test_jobs_asks_for_the_intel_gpus_by_name_rather_than_run_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("MILARUN_DEV_DIR", str(tmp_path))  # no NVIDIA or AMD device file
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    two = tuple({"index": i, "name": "Intel(R) Data Center GPU Max 1550"} for i in range(2))
    plain = gpu.plain("NVML unavailable: NVML Shared Library Not Found")
    with pytest.raises(GPUDiscoveryError) as found:
        devices.discover_devices(plain, probe=lambda: TorchGPUs(two, {"xpu": True}))
    said = str(found.value)
    assert said.startswith("torch sees 2 GPUs (Intel, torch.xpu), but NVML unavailable")
    assert "no maintained Python binding of xpu-smi" in said and "--devices 0,1,..." in said
