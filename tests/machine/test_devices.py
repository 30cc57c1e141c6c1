"""Device specs, discovery, per-instance environment and monitors (milarun/devices.py,
milarun/sysinfo.py), with a fake NVML module (tests/fakes.py) instead of a real GPU."""

from __future__ import annotations

import time

import pytest

from conftest import ROOT
from fakes import FakeNVML
from milarun import errors
from milarun.machine import devices, gpuprobe, monitors, sysinfo
from milarun.machine.devices import (
    CPU_KIND,
    GPU_KIND,
    Device,
    DeviceSpecError,
    discover_devices,
    instance_device_label,
    instance_environ,
    parse_device_spec,
)
from milarun.machine.gpu.nvml import NvmlBackend
from milarun.machine.monitors import cpu_monitor, gpu_monitor

MiB = 2**20


def two_gpus() -> list[dict]:
    return [
        {
            "name": "NVIDIA A100-SXM4-40GB",
            "uuid": "GPU-aaaa-0000",
            "utilization": [10, 0],
            "memory_used": 512 * MiB,
            "memory": 40960 * MiB,
            "temperature": 40,
            "power_usage_mw": 60000,
        },
        {
            "name": b"NVIDIA H100 80GB HBM3",
            "uuid": "GPU-bbbb-1111",
            "utilization": [75, 0],
            "memory_used": 3 * 1024 * MiB,
            "memory": 81920 * MiB,
            "temperature": 67,
            "power_usage_mw": 312500,
        },
    ]


@pytest.fixture
def clean_env(monkeypatch):
    for var in (
        "CUDA_VISIBLE_DEVICES",
        "MILARUN_DEVICE",
        "OMP_NUM_THREADS",
        "LOCAL_RANK",
        "OMP_WAIT_POLICY",
        "CUDA_DEVICE_ORDER",
        "MILARUN_PCI_BUS_IDS",
        "MILARUN_DEV_DIR",
    ):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


# -- parse_device_spec ---------------------------------------------------------------------
def test_parse_gpu_list():
    devs = parse_device_spec("0,1,3")
    assert [d.kind for d in devs] == [GPU_KIND] * 3
    assert [d.id for d in devs] == ["0", "1", "3"]
    assert [d.label for d in devs] == ["cuda:0", "cuda:1", "cuda:3"]


def test_parse_gpu_list_tolerates_spaces_and_uuids():
    assert [d.id for d in parse_device_spec(" 2 , 5 ")] == ["2", "5"]
    devs = parse_device_spec("GPU-0a1b2c3d-aaaa")
    assert devs == [Device(GPU_KIND, "GPU-0a1b2c3d-aaaa")]


def test_parse_cpu_slices():
    devs = parse_device_spec("cpu:2")
    assert len(devs) == 2
    assert all(d.kind == CPU_KIND for d in devs)
    assert [d.label for d in devs] == ["cpu:0", "cpu:1"]
    assert [d.id for d in devs] == ["0", "1"]
    assert all(d.slices == 2 for d in devs)


def test_parse_single_cpu():
    devs = parse_device_spec("cpu")
    assert devs == [Device(CPU_KIND, "0", 1)]
    assert devs[0].label == "cpu:0"
    assert parse_device_spec("cpu:1") == devs


@pytest.mark.parametrize("spec", ["", "cpu:0", "gpu", "0,,1", "0,0", "abc", "cpu:x", "-1"])
def test_parse_bad_specs(spec):
    with pytest.raises(DeviceSpecError) as info:
        parse_device_spec(spec)
    assert repr(spec) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_parse_duplicate_says_twice():
    with pytest.raises(DeviceSpecError, match="twice"):
        parse_device_spec("1,2,1")


# -- discover_devices ----------------------------------------------------------------------
def test_discover_one_gpu_per_nvml_device(clean_env):
    fake = FakeNVML(two_gpus())
    devs = discover_devices(backend=NvmlBackend(fake))
    assert devs == [Device(GPU_KIND, "0"), Device(GPU_KIND, "1")]


def test_discover_honours_cuda_visible_devices(clean_env):
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "1")
    devs = discover_devices(backend=NvmlBackend(FakeNVML(two_gpus())))
    assert devs == [Device(GPU_KIND, "1")]

    clean_env.setenv("CUDA_VISIBLE_DEVICES", "1, 0")
    assert [d.id for d in discover_devices(backend=NvmlBackend(FakeNVML(two_gpus())))] == ["1", "0"]


def test_discover_with_gpus_hidden_gives_cpu_slice(clean_env):
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "")
    assert discover_devices(backend=NvmlBackend(FakeNVML(two_gpus()))) == [Device(CPU_KIND, "0", 1)]


def test_discover_no_gpu_falls_back_to_cpu(clean_env):
    devs = discover_devices(backend=NvmlBackend(FakeNVML([])))
    assert devs == [Device(CPU_KIND, "0", 1)]
    assert devs[0].label == "cpu:0"


def test_discover_count_error_falls_back_to_cpu(clean_env):
    fake = FakeNVML(two_gpus())

    def broken():
        raise RuntimeError("NVML_ERROR_UNKNOWN")

    fake.nvmlDeviceGetCount = broken
    clean_env.setenv("MILARUN_DEV_DIR", "/nonexistent")  # no device file, and torch:
    assert discover_devices(backend=NvmlBackend(fake), probe=lambda: gpuprobe.TorchGPUs()) == [
        Device(CPU_KIND, "0", 1)
    ]  # sees none: a CPU machine


def test_discover_without_nvml_on_this_machine(clean_env):
    # No GPU driver here: the real loader fails and discovery gives one CPU slice.
    backend = devices.gpu.load()
    if backend.usable:
        pytest.skip("this machine has a working NVML")
    assert backend.reason
    assert discover_devices() == [Device(CPU_KIND, "0", 1)]


# -- a GPU machine whose NVML is broken never runs silently on its CPU --------------------
def dev_dir(env: pytest.MonkeyPatch, folder, *names: str) -> None:
    """MILARUN_DEV_DIR: a folder holding these (empty) device files."""
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).touch()
    env.setenv("MILARUN_DEV_DIR", str(folder))


def torch_sees(count: int, asked: list | None = None):
    """A torch probe (gpuprobe.torch_gpus) that sees ``count`` GPUs and notes each call."""
    from milarun.machine.gpuprobe import TorchGPUs

    def probe():
        if asked is not None:
            asked.append(1)
        return TorchGPUs(tuple({"index": i} for i in range(count)))

    return probe


def broken_count() -> FakeNVML:
    fake = FakeNVML(two_gpus())

    def broken():
        raise RuntimeError("NVML_ERROR_LIB_RM_VERSION_MISMATCH")

    fake.nvmlDeviceGetCount = broken
    return fake


def test_device_file_and_failing_nvml_is_an_error_not_a_cpu_run(clean_env, tmp_path):
    dev_dir(clean_env, tmp_path / "dev", "nvidia0", "nvidiactl", "nvidia-uvm")
    asked: list = []
    with pytest.raises(errors.GPUDiscoveryError) as info:
        discover_devices(backend=NvmlBackend(broken_count()), probe=torch_sees(0, asked))
    message = str(info.value)
    assert (
        f"{tmp_path / 'dev' / 'nvidia0'} exists, but NVML failed: "
        "NVML_ERROR_LIB_RM_VERSION_MISMATCH" in message
    )
    assert "nvidiactl" not in message  # only the per-GPU nodes are evidence
    assert "libnvidia-ml" in message and "--devices cpu:N" in message
    assert "\n" not in message
    assert asked == []  # the device file is enough: torch is not asked
    assert isinstance(info.value, DeviceSpecError)  # the CLI's one-line errors


def test_device_files_but_nvml_sees_no_gpu(clean_env, tmp_path):
    dev_dir(clean_env, tmp_path / "dev", "nvidia1", "nvidia0")
    with pytest.raises(
        errors.GPUDiscoveryError, match=r"nvidia0, .*nvidia1 exist, but NVML sees no GPU; install"
    ):
        discover_devices(backend=NvmlBackend(FakeNVML([])), probe=torch_sees(0))


def test_amd_device_file_says_to_name_the_gpus(clean_env, tmp_path):
    dev_dir(clean_env, tmp_path / "dev", "kfd")
    with pytest.raises(errors.GPUDiscoveryError, match=r"kfd exists.*--devices 0,1"):
        discover_devices(backend=NvmlBackend(broken_count()), probe=torch_sees(0))


def test_failing_nvml_without_device_files_asks_torch(clean_env, tmp_path):
    dev_dir(clean_env, tmp_path / "empty")
    with pytest.raises(
        errors.GPUDiscoveryError, match=r"^torch sees 1 GPU, but NVML failed: NVML_ERROR_LIB_RM"
    ):
        discover_devices(backend=NvmlBackend(broken_count()), probe=torch_sees(1))
    asked: list = []
    assert discover_devices(backend=NvmlBackend(broken_count()), probe=torch_sees(0, asked)) == [
        Device(CPU_KIND, "0", 1)
    ]  # a CPU machine: one CPU slice, as before
    assert asked == [1]


def test_nvml_that_works_never_asks_torch(clean_env, tmp_path):
    dev_dir(clean_env, tmp_path / "empty")
    asked: list = []
    assert discover_devices(backend=NvmlBackend(FakeNVML([])), probe=torch_sees(2, asked)) == [
        Device(CPU_KIND, "0", 1)
    ]  # NVML works and counts 0, no device file: a CPU box
    assert [
        d.id
        for d in discover_devices(
            backend=NvmlBackend(FakeNVML(two_gpus())), probe=torch_sees(2, asked)
        )
    ] == ["0", "1"]
    assert asked == []


def test_gpus_hidden_on_purpose_run_on_the_cpu(clean_env, tmp_path):
    dev_dir(clean_env, tmp_path / "dev", "nvidia0")
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "")
    assert discover_devices(backend=NvmlBackend(broken_count()), probe=torch_sees(1)) == [
        Device(CPU_KIND, "0", 1)
    ]


def test_jobs_refuses_a_gpu_machine_without_nvml(tmp_path):
    """The real CLI on a machine that shows /dev/nvidia0 while NVML fails: one line, exit 1,
    nothing run."""
    from conftest import milarun

    if devices.gpu.load().usable:
        pytest.skip("this machine has a working NVML")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").touch()
    done = milarun(
        "jobs",
        "quick",
        "--name",
        "calibration",
        "-o",
        tmp_path / "out",
        env={"MILARUN_DEV_DIR": str(tmp_path / "dev")},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("milarun: error: "), done.stderr
    assert f"{tmp_path / 'dev' / 'nvidia0'} exists, but NVML" in lines[0]
    assert "--devices cpu:N" in lines[0]
    assert not list((tmp_path / "out").glob("*.json"))


# -- gpu_monitor ---------------------------------------------------------------------------
def test_gpu_monitor_samples_only_its_device():
    fake = FakeNVML(two_gpus())
    mon = gpu_monitor(backend=NvmlBackend(fake), ids=["1"], interval=0.05).start()
    time.sleep(0.25)
    record = mon.stop()

    assert fake.asked == [1]  # only device 1's handle was requested
    assert set(fake.read) == {1}  # and only device 1 was read
    assert record["interval"] == 0.05
    assert "note" not in record
    samples = record["samples"]
    assert len(samples) >= 2
    for s in samples:
        assert set(s["gpus"]) == {"1"}
        g = s["gpus"]["1"]
        assert g["load"] == pytest.approx(0.75)
        assert g["memory"] == pytest.approx([3072.0, 81920.0])  # MiB used, total
        assert g["temperature"] == 67
        assert g["power"] == pytest.approx(312.5)  # W from mW
        assert s["t"] >= 0
    times = [s["t"] for s in samples]
    assert times == sorted(times)


def test_gpu_monitor_by_uuid():
    fake = FakeNVML(two_gpus())
    mon = gpu_monitor(backend=NvmlBackend(fake), ids=["GPU-aaaa-0000"], interval=0.05).start()
    time.sleep(0.1)
    record = mon.stop()
    assert fake.asked == ["GPU-aaaa-0000"]
    g = record["samples"][0]["gpus"]["GPU-aaaa-0000"]
    assert g["load"] == pytest.approx(0.10)
    assert g["memory"] == pytest.approx([512.0, 40960.0])
    assert g["power"] == pytest.approx(60.0)


def test_gpu_monitor_no_ids_records_no_samples():
    fake = FakeNVML(two_gpus())
    mon = gpu_monitor(backend=NvmlBackend(fake), ids=[], interval=0.05).start()
    time.sleep(0.1)
    record = mon.stop()
    assert record["samples"] == []
    assert record["note"].startswith("no samples")
    assert "no GPU" in record["note"]
    assert fake.asked == [] and fake.read == []


def test_gpu_monitor_on_cpu_instance_records_no_samples(clean_env):
    clean_env.setenv("MILARUN_DEVICE", "cpu:0")
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "")
    fake = FakeNVML(two_gpus())
    record = gpu_monitor(backend=NvmlBackend(fake), interval=0.05).start().stop()
    assert record["samples"] == []
    assert record["note"].startswith("no samples")
    assert fake.read == []


def test_gpu_monitor_handle_error_records_no_samples():
    fake = FakeNVML(two_gpus(), fail_handles=True)
    mon = gpu_monitor(backend=NvmlBackend(fake), ids=["1"], interval=0.05).start()  # no exception
    time.sleep(0.1)
    record = mon.stop()
    assert record["samples"] == []
    assert record["note"].startswith("no samples")
    assert "NVML_ERROR_INVALID_ARGUMENT" in record["note"]
    assert fake.asked == [1]


def test_gpu_monitor_keeps_load_and_memory_when_power_unsupported():
    fake = FakeNVML(two_gpus(), fail_power=True)
    mon = gpu_monitor(backend=NvmlBackend(fake), ids=["1"], interval=0.05).start()
    time.sleep(0.15)
    record = mon.stop()
    assert record["samples"], record.get("note")
    g = record["samples"][0]["gpus"]["1"]
    assert g["load"] == pytest.approx(0.75)
    assert g["memory"] == pytest.approx([3072.0, 81920.0])
    # a reading that fails is None in every sample, never an exception or a made-up value
    assert all(s["gpus"]["1"]["power"] is None for s in record["samples"])


# -- cpu_monitor ---------------------------------------------------------------------------
def test_cpu_monitor_real_samples():
    mon = cpu_monitor(interval=0.05).start()
    # some work so cpu_percent has something to measure, with pauses so the monitor
    # thread gets the GIL
    x = 0
    for _ in range(8):
        end = time.time() + 0.01
        while time.time() < end:
            x += 1
        time.sleep(0.03)
    record = mon.stop()
    assert "note" not in record
    samples = record["samples"]
    assert len(samples) >= 2
    for s in samples:
        assert s["rss_mb"] > 1
        assert 0 <= s["ram_used_percent"] <= 100
        assert s["cpu_percent"] >= 0
    assert max(s["cpu_percent"] for s in samples[1:]) > 0


def test_monitor_stopped_before_a_sample_has_note():
    mon = monitors.Monitor(lambda: {"x": 1}, interval=0.05)  # never started
    record = mon.stop()
    assert record["samples"] == []
    assert record["note"] == "no samples: run ended before a sample"


# -- sysinfo -------------------------------------------------------------------------------
def test_system_record_lists_gpus_and_driver():
    fake = FakeNVML(two_gpus(), driver=b"550.54.15")
    rec = sysinfo.system_record(backend=NvmlBackend(fake))
    assert rec["driver"] == "550.54.15"
    assert [g["name"] for g in rec["gpus"]] == ["NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"]
    assert [g["index"] for g in rec["gpus"]] == [0, 1]
    assert [g["memory_mb"] for g in rec["gpus"]] == pytest.approx([40960.0, 81920.0])
    assert rec["cpu"]["count"] >= 1
    assert rec["ram_gb"] > 0
    assert rec["python"].count(".") == 2
    assert "note" not in rec


def test_system_record_nvml_failure_is_a_note():
    fake = FakeNVML(two_gpus())

    def broken():
        raise RuntimeError("driver gone")

    fake.nvmlSystemGetDriverVersion = broken
    rec = sysinfo.system_record(backend=NvmlBackend(fake))
    assert rec["gpus"] == [] and rec["driver"] is None
    assert "driver gone" in rec["note"]


# -- instance_environ ----------------------------------------------------------------------
def test_instance_environ_gpu(clean_env):
    env = instance_environ([Device(GPU_KIND, "3")])
    assert env["CUDA_VISIBLE_DEVICES"] == "3"  # not resolved to a UUID: read in PCI order
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["MILARUN_DEVICE"] == "cuda:3"
    assert "OMP_NUM_THREADS" not in env and "MILARUN_PCI_BUS_IDS" not in env
    resolved = Device(GPU_KIND, "3", uuid="GPU-cccc-3333", pci_bus_id="00000000:41:00.0")
    env = instance_environ([resolved])
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-cccc-3333"  # CUDA opens it by UUID
    assert env["MILARUN_DEVICE"] == "cuda:3"  # the id as the operator named it
    assert env["MILARUN_PCI_BUS_IDS"] == "00000000:41:00.0"


def test_instance_environ_several_gpus(clean_env):
    env = instance_environ(parse_device_spec("2,0"))
    assert env["CUDA_VISIBLE_DEVICES"] == "2,0"


def test_instance_environ_cpu_slice(clean_env):
    slices = parse_device_spec("cpu:2")
    env = instance_environ([slices[1]], cpu_count=4)
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["MILARUN_DEVICE"] == "cpu:1"
    assert env["OMP_NUM_THREADS"] == "2"

    assert env["OMP_WAIT_POLICY"] == "PASSIVE"  # idle threads must not starve loaders

    env0 = instance_environ([slices[0]], cpu_count=4)
    assert env0["MILARUN_DEVICE"] == "cpu:0"
    assert env0["OMP_NUM_THREADS"] == "2"
    clean_env.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's choice wins
    assert "OMP_WAIT_POLICY" not in instance_environ([slices[0]], cpu_count=4)


def test_instance_environ_cpu_threads(clean_env):
    assert instance_environ(parse_device_spec("cpu"), cpu_count=8)["OMP_NUM_THREADS"] == "8"
    three = parse_device_spec("cpu:3")
    assert instance_environ([three[0]], cpu_count=8)["OMP_NUM_THREADS"] == "2"
    # more slices than cores: never zero threads
    many = parse_device_spec("cpu:4")
    assert instance_environ([many[0]], cpu_count=2)["OMP_NUM_THREADS"] == "1"
    # a group of slices (distributed job) gets their combined share
    env = instance_environ(many[:2], cpu_count=8)
    assert env["OMP_NUM_THREADS"] == "4"
    assert env["MILARUN_DEVICE"] == "cpu:0,cpu:1"


def test_instance_environ_respects_user_omp(clean_env):
    clean_env.setenv("OMP_NUM_THREADS", "7")
    env = instance_environ([parse_device_spec("cpu:2")[0]], cpu_count=4)
    assert "OMP_NUM_THREADS" not in env  # the user's own value is inherited


# -- instance_device_label -----------------------------------------------------------------
@pytest.mark.parametrize(
    "milarun_device, visible, expected",
    [
        ("cpu:1", None, "cpu:1"),
        ("cpu:0", "", "cpu:0"),
        ("cpu:1", "0", "cpu:1"),  # a CPU slice wins over a stray CUDA_VISIBLE_DEVICES
        ("cuda", "2", "cuda:2"),
        ("cuda", "3,1", "cuda:3"),
        ("cuda", None, "cuda:0"),
        (None, "5", "cuda:5"),
        (None, "", "cpu:0"),
    ],
)
def test_instance_device_label(clean_env, milarun_device, visible, expected):
    if milarun_device is not None:
        clean_env.setenv("MILARUN_DEVICE", milarun_device)
    if visible is not None:
        clean_env.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert instance_device_label() == expected


def test_label_round_trips_through_instance_environ(clean_env):
    for dev in parse_device_spec("0,4") + parse_device_spec("cpu:3"):
        for key, value in instance_environ([dev], cpu_count=6).items():
            clean_env.setenv(key, value)
        assert instance_device_label() == dev.label
        clean_env.delenv("OMP_NUM_THREADS", raising=False)


def test_a_source_checkout_records_its_pyproject_version():
    # gpu-check.sh runs milarun from the checkout through PYTHONPATH: not "unknown"
    import tomllib

    from milarun.machine import sysinfo

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert sysinfo._source_version() == declared


def test_sysinfo_without_torch_loaded_says_what_a_loaded_torch_says():
    # `milarun sysinfo` never imports torch (seconds); its strings match the results'
    import json
    import subprocess
    import sys

    from conftest import cli_env

    code = (
        "import json, sys; from milarun.machine import sysinfo; "
        "a = sysinfo._torch_info(); assert 'torch' not in sys.modules; import torch; "
        "b = sysinfo._torch_info(); print(json.dumps([a, b]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=cli_env(), cwd=ROOT, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    unloaded, loaded = json.loads(done.stdout)
    for key in ("torch", "cuda", "hip", "cudnn"):
        assert unloaded.get(key) == loaded.get(key), key


def test_gpu_monitor_records_the_inventory_of_its_own_gpus():
    """The monitor's record says what each GPU it sampled is (name, UUID, memory, PCI device
    id: NVML's pciDeviceId), read from that GPU alone: verify compares it with the system
    record."""
    gpus = two_gpus()
    gpus[1]["pci_id"] = 0x233010DE
    fake = FakeNVML(gpus)
    record = gpu_monitor(backend=NvmlBackend(fake), ids=["1"], interval=0.05).start().stop()
    assert record["inventory"] == {
        "1": {
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-bbbb-1111",
            "memory_mb": 81920.0,
            "pci_device_id": "0x2330",
        }
    }
    assert set(fake.read) == {1}  # the other GPU untouched
    bare = gpu_monitor(backend=NvmlBackend(FakeNVML(two_gpus())), ids=["0"], interval=0.05)
    assert bare.start().stop()["inventory"]["0"]["pci_device_id"] is None  # not given: None
