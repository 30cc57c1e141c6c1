"""The reproducibility record a bid carries: what it reads from NVML (through the fake at
the boundary), from /sys/class/infiniband and from the environment."""

from __future__ import annotations

from fakes import FakeNVML
from milarun.machine import provenance
from milarun.machine.gpu.nvml import NvmlBackend


def test_vbios_and_uuid_per_gpu_from_nvml():
    nvml = FakeNVML(
        [
            # what the one NVML inventory reads (machine.devices.nvml_gpus), and the VBIOS
            {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-a", "memory": 1, "vbios": "96.00"},
            {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-b", "memory": 1, "vbios": b"96.01"},
        ]
    )
    found = provenance.gpu_firmware(NvmlBackend(nvml))
    assert found["driver"] == nvml.driver
    assert [(g["uuid"], g["vbios"]) for g in found["gpus"]] == [
        ("GPU-a", "96.00"),
        ("GPU-b", "96.01"),
    ]


def test_a_gpu_without_a_vbios_reading_is_said_not_fatal():
    found = provenance.gpu_firmware(
        NvmlBackend(FakeNVML([{"name": "x", "uuid": "GPU-a", "memory": 1}]))
    )
    assert found["gpus"] == [] and "NVML query failed" in found["note"]


def test_infiniband_adapters_from_sysfs(tmp_path):
    port = tmp_path / "mlx5_0"
    port.mkdir()
    (port / "fw_ver").write_text("28.39.1002\n")
    (port / "board_id").write_text("MT_0000000838\n")
    assert provenance.infiniband(tmp_path) == [
        {"device": "mlx5_0", "fw_ver": "28.39.1002", "board_id": "MT_0000000838", "hca_type": None}
    ]
    assert provenance.infiniband(tmp_path / "none") == []


def test_the_container_image_only_where_the_environment_names_it():
    assert provenance.container_image({"MILARUN_IMAGE_DIGEST": "sha256:abc", "HOME": "/"}) == {
        "MILARUN_IMAGE_DIGEST": "sha256:abc"
    }
    assert provenance.container_image({}) == {}
