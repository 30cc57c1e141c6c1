"""GPU ids on a machine that shows no GPU are refused before anything runs."""

from __future__ import annotations

import pytest

from milarun import errors
from milarun.machine import gpu, gpuids, gpuprobe
from milarun.machine.devices import parse_device_spec


def no_nvml(monkeypatch, tmp_path, files=()):
    monkeypatch.setattr(gpu, "load", lambda: gpu.plain("NVML unavailable: no library"))
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in files:
        (dev / name).write_text("")
    monkeypatch.setenv("MILARUN_DEV_DIR", str(dev))
    monkeypatch.setattr(gpuprobe, "torch_gpus", lambda *a, **k: gpuprobe.TorchGPUs())


def test_gpu_ids_without_any_gpu_are_refused(monkeypatch, tmp_path):
    no_nvml(monkeypatch, tmp_path)
    with pytest.raises(errors.DeviceSpecError) as info:
        gpuids.resolve_gpus(parse_device_spec("0"))
    assert "this machine shows no GPU" in str(info.value) and "cpu:N" in str(info.value)


def test_a_gpu_machine_without_nvml_still_goes_by_index(monkeypatch, tmp_path):
    no_nvml(monkeypatch, tmp_path, files=["nvidia0", "nvidiactl"])
    (dev,) = gpuids.resolve_gpus(parse_device_spec("0"))
    assert dev.id == "0" and dev.uuid is None
