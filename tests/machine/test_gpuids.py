"""Each instance gets the GPU the operator named (milarun/gpuids.py), on a fake 2-GPU host whose
CUDA order (fastest first) and NVML order (PCI bus) differ; instances never inherit the
operator's torchrun rank variables; a test that trains on the CPU never touches CUDA."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import BENCHES, load_all, milarun
from fakes import H100, FakeNVML
from milarun import errors
from milarun.cli import options
from milarun.machine import devices, gpu, gpuids, monitors
from milarun.machine.devices import GPU_KIND, Device, parse_device_spec
from milarun.machine.gpu.nvml import NvmlBackend
from milarun.run import plan, profile

MiB = 2**20


def mixed_host() -> list[dict]:
    """NVML's view, in PCI bus order: an A100 on bus 05, then the real H100 on bus 06."""
    return [
        {
            "name": "NVIDIA A100-SXM4-40GB",
            "uuid": "GPU-0a100000-1111-2222-3333-444444444444",
            "pci_bus_id": "00000000:00:05.0",
            "utilization": [10, 0],
            "memory_used": 512 * MiB,
            "memory": 40960 * MiB,
            "temperature": 40,
            "power_usage_mw": 60000,
        },
        {
            "name": H100["name"],
            "uuid": H100["uuid"],
            "pci_bus_id": H100["pci_bus_id"],
            "utilization": [75, 0],
            "memory_used": 3 * 1024 * MiB,
            "memory": H100["memory"],
            "temperature": 67,
            "power_usage_mw": H100["power_usage_mw"],
        },
    ]


def cuda_opens(env: dict[str, str], gpus: list[dict]) -> list[str]:
    """The UUIDs of the GPUs CUDA numbers 0, 1, ... under ``env`` (its documented rules):
    CUDA_VISIBLE_DEVICES lists UUIDs, or indices in CUDA_DEVICE_ORDER, which is
    FASTEST_FIRST (here: the H100 first) unless it says PCI_BUS_ID."""
    if env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        order = sorted(gpus, key=lambda g: g["pci_bus_id"])
    else:
        order = sorted(gpus, key=lambda g: "H100" not in g["name"])
    names = [x for x in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if x]
    return [n if n.startswith("GPU-") else order[int(n)]["uuid"] for n in names]


@pytest.fixture
def gpu_env(monkeypatch):
    for var in (
        "CUDA_VISIBLE_DEVICES",
        "MILARUN_DEVICE",
        "CUDA_DEVICE_ORDER",
        "LOCAL_RANK",
        devices.BUS_IDS_ENV,
    ):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def per_gpu_instances(tmp_path: Path, devs: list[Device]) -> list[plan.Instance]:
    job = profile.Job(
        suite="t", name="calibration", experiment="milabench.models.calibration:main", arguments={}
    )
    opts = plan.LaunchOptions(outdir=tmp_path, dataroot=tmp_path)
    return plan.plan_instances(job, 0, devs, opts)


def test_the_fake_host_orders_differ():
    gpus = mixed_host()
    # Index 0 as CUDA reads it by default is the H100; NVML's index 0 is the A100.
    assert cuda_opens({"CUDA_VISIBLE_DEVICES": "0"}, gpus) == [gpus[1]["uuid"]]
    assert cuda_opens({"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, gpus) == [
        gpus[0]["uuid"]
    ]


@pytest.mark.parametrize("spec", ["0,1", "1,0"])
def test_each_instance_opens_the_gpu_the_operator_named(gpu_env, tmp_path, spec):
    gpus = mixed_host()
    fake = FakeNVML(gpus)
    devs = gpuids.resolve_gpus(parse_device_spec(spec), backend=NvmlBackend(fake))
    for inst, dev in zip(per_gpu_instances(tmp_path, devs), devs):
        want = gpus[int(dev.id)]  # the operator's id is NVML's index
        env = inst.env
        assert env["CUDA_VISIBLE_DEVICES"] == want["uuid"]
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert cuda_opens(env, gpus) == [want["uuid"]]
        assert inst.job_id == f"0.{dev.id}" and dev.label == f"cuda:{dev.id}"

        # Inside the instance: the monitor reads that GPU's NVML handle, and the result
        # records the operator's id, the UUID and the PCI bus id.
        for var in (
            "CUDA_VISIBLE_DEVICES",
            "CUDA_DEVICE_ORDER",
            "MILARUN_DEVICE",
            devices.BUS_IDS_ENV,
        ):
            gpu_env.setenv(var, env[var])
        fake.asked.clear()
        fake.read.clear()
        mon = monitors.gpu_monitor(backend=NvmlBackend(fake), interval=0.05).start()
        time.sleep(0.12)
        record = mon.stop()
        assert fake.asked == [want["uuid"]]
        assert set(fake.read) == {int(dev.id)}
        assert record["samples"], record.get("note")
        for sample in record["samples"]:
            assert list(sample["gpus"]) == [want["uuid"]]
            assert sample["gpus"][want["uuid"]]["memory"][1] == pytest.approx(want["memory"] / MiB)
        assert devices.instance_device_label() == f"cuda:{dev.id}"
        assert gpuids.instance_gpus() == (
            gpuids.GpuIdentity(dev.id, want["uuid"], want["pci_bus_id"]),
        )


def test_the_real_h100_readings_resolve():
    gpus = mixed_host()
    (dev,) = gpuids.resolve_gpus(parse_device_spec("1"), backend=NvmlBackend(FakeNVML(gpus)))
    assert dev == Device(
        GPU_KIND,
        "1",
        uuid="GPU-a2325795-1c9f-084d-8b93-322f176dd787",
        pci_bus_id="00000000:00:06.0",
    )
    # A UUID the operator gives is kept as the id and looked up by UUID.
    (dev,) = gpuids.resolve_gpus(
        parse_device_spec(H100["uuid"]), backend=NvmlBackend(FakeNVML(gpus))
    )
    assert (dev.id, dev.uuid, dev.pci_bus_id) == (H100["uuid"], H100["uuid"], "00000000:00:06.0")


def test_a_torchrun_group_lists_its_gpus_by_uuid_in_rank_order(gpu_env, tmp_path):
    gpus = mixed_host()
    devs = gpuids.resolve_gpus(parse_device_spec("1,0"), backend=NvmlBackend(FakeNVML(gpus)))
    job = profile.Job(
        suite="t",
        name="scaling",
        experiment="milabench.models.scaling:main",
        arguments={},
        partition="gpu-progression",
    )
    opts = plan.LaunchOptions(outdir=tmp_path, dataroot=tmp_path)
    last = plan.plan_progression(job, 0, devs, opts)[-1][0]
    # rank r trains on cuda:r (LOCAL_RANK), the r-th listed GPU: the operator's r-th id
    assert cuda_opens(last.env, gpus) == [gpus[1]["uuid"], gpus[0]["uuid"]]
    assert last.env["MILARUN_DEVICE"] == "cuda:1,cuda:0"
    assert [g.id for g in gpuids.instance_gpus(last.env)] == ["1", "0"]


def test_unresolved_gpu_falls_back_to_its_index_in_pci_order(gpu_env, tmp_path):
    gpus = mixed_host()
    devs = gpuids.resolve_gpus(
        parse_device_spec("0"), backend=NvmlBackend(FakeNVML(gpus, fail_handles=True))
    )
    (inst,) = per_gpu_instances(tmp_path, devs)
    assert inst.env["CUDA_VISIBLE_DEVICES"] == "0"
    assert cuda_opens(inst.env, gpus) == [gpus[0]["uuid"]]  # NVML's index 0, not CUDA's
    (gpu,) = gpuids.instance_gpus(inst.env)
    assert gpu.id == "0" and gpu.uuid is None and gpu.pci_bus_id is None
    assert "index 0, in PCI_BUS_ID order" in gpu.note


def test_unresolved_gpus_are_said_once_each(gpu_env, capsys, monkeypatch, tmp_path):
    options.setup_logging()
    gpuids.resolve_gpus(
        parse_device_spec("0"), backend=NvmlBackend(FakeNVML(mixed_host(), fail_handles=True))
    )
    err = capsys.readouterr().err
    assert err.startswith("milarun: warning: NVML cannot describe GPU 0 (")
    assert "by index, in PCI bus order" in err
    monkeypatch.setattr(gpu, "load", lambda: gpu.plain("NVML unavailable: no driver"))
    (tmp_path / "nvidia0").write_text("")  # a GPU machine whose NVML fails: by index
    monkeypatch.setenv("MILARUN_DEV_DIR", str(tmp_path))
    devs = gpuids.resolve_gpus(parse_device_spec(f"0,{H100['uuid']}"))
    assert capsys.readouterr().err.strip() == (
        f"milarun: warning: NVML unavailable: no driver: GPUs 0,{H100['uuid']} go to their "
        "instances by index, in PCI bus order"
    )
    assert [d.uuid for d in devs] == [None, H100["uuid"]]  # a UUID needs no NVML


def test_an_index_nvml_does_not_have_is_refused():
    with pytest.raises(errors.DeviceSpecError, match=r"GPU 2: NVML sees 2 GPU\(s\), ids 0 to 1"):
        gpuids.resolve_gpus(parse_device_spec("0,2"), backend=NvmlBackend(FakeNVML(mixed_host())))


def test_another_cuda_device_order_is_warned_about(gpu_env, capsys):
    options.setup_logging()
    gpu_env.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    gpuids.resolve_gpus(parse_device_spec("0"), backend=NvmlBackend(FakeNVML(mixed_host())))
    err = capsys.readouterr().err
    assert err.startswith("milarun: warning: CUDA_DEVICE_ORDER=FASTEST_FIRST is not used")
    assert "PCI bus order" in err
    gpu_env.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    gpuids.resolve_gpus(parse_device_spec("0"), backend=NvmlBackend(FakeNVML(mixed_host())))
    assert capsys.readouterr().err == ""


def test_cpu_slices_are_not_resolved():
    devs = parse_device_spec("cpu:2")
    assert gpuids.resolve_gpus(devs, backend=NvmlBackend(FakeNVML(mixed_host()))) == devs
    assert gpuids.instance_gpus({"MILARUN_DEVICE": "cpu:0", "CUDA_VISIBLE_DEVICES": ""}) == ()


def test_an_old_result_environment_still_names_its_gpu():
    """Results written before UUIDs: MILARUN_DEVICE=cuda, CUDA_VISIBLE_DEVICES=<index>."""
    (gpu,) = gpuids.instance_gpus({"MILARUN_DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": "3"})
    assert gpu.id == "3" and gpu.uuid is None
    assert "FASTEST_FIRST" in gpu.note


# -- the operator's torchrun variables stay out of instances --------------------------------
LEFTOVER = {
    "WORLD_SIZE": "4",
    "RANK": "3",
    "LOCAL_RANK": "3",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "old",
}


def test_launch_environ_drops_rank_variables(gpu_env):
    for key, value in LEFTOVER.items():
        gpu_env.setenv(key, value)
    gpu_env.setenv("NCCL_DEBUG", "INFO")
    env = devices.launch_environ(parse_device_spec("cpu:1"))
    assert not set(LEFTOVER) & set(env)
    assert env["NCCL_DEBUG"] == "INFO" and env["MILARUN_DEVICE"] == "cpu:0"


@pytest.mark.slow
def test_instances_never_see_the_operators_rank_variables(tmp_path, monkeypatch):
    """A real ``milarun jobs`` from a shell with a leftover WORLD_SIZE=4 RANK=3, on a machine
    that also shows a GPU device file NVML cannot see: ``--devices cpu:1`` runs all the same,
    and the instance does not believe it is rank 3 of 4."""
    monkeypatch.syspath_prepend(str(BENCHES))
    import rankenv

    for key, value in LEFTOVER.items():  # the bench itself tells leftovers
        monkeypatch.setenv(key, value)
    with pytest.raises(RuntimeError, match="RANK=3, TORCHELASTIC_RUN_ID=old, WORLD_SIZE=4"):
        rankenv.no_rank_variables(None, [])

    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").touch()
    env = {**LEFTOVER, "MILARUN_DEV_DIR": str(tmp_path / "dev")}

    prof = tmp_path / "ranks.json"
    prof.write_text(
        json.dumps(
            {"ranks": {"experiment": "rankenv:no_rank_variables", "arguments": {"--min-slices": 5}}}
        )
    )
    done = milarun("jobs", prof, "--devices", "cpu:1", "-o", tmp_path / "out", env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = load_all(tmp_path / "out").values()
    assert result["success"], result["error"]
    assert result["device"] == "cpu:0" and result["gpu_identity"] is None


# -- a test that trains on the CPU never initialises CUDA ----------------------------------
def test_cart_on_a_gpu_slot_never_touches_cuda(gpu_env, tmp_path):
    """cart trains on the CPU: on a GPU slot its rate log syncs the CPU (a no-op) and it
    never asks torch for the slot's GPU. (Checked on a real H100 too: no CUDA context.)"""
    torch = pytest.importorskip("torch")
    from milabench.models import cart
    from milarun.measure.experiment import Experiment

    def no_cuda(name: str):  # one function per name: torch's tracer maps each to a rule
        def refuse(*args, **kwargs):
            raise AssertionError(
                f"torch.cuda.{name}: CUDA was used by a test that trains on the CPU"
            )

        return refuse

    # The instance is given a GPU, as `jobs` gives one: any CUDA call would be its.
    gpu_env.setenv("MILARUN_DEVICE", "cuda:0")
    gpu_env.setenv("CUDA_VISIBLE_DEVICES", H100["uuid"])
    # (torch.cuda.is_available stays: torch's own optimizers ask it; it creates no context)
    for name in (
        "synchronize",
        "init",
        "_lazy_init",
        "set_device",
        "get_device_name",
        "get_device_properties",
    ):
        gpu_env.setattr(torch.cuda, name, no_cuda(name))

    slot = Experiment("slot", outdir=tmp_path, dataroot=tmp_path, device=torch.device("cuda"))
    with pytest.raises(AssertionError, match="synchronize"):
        slot.rate_log("x").sync()  # the fake boundary bites: a GPU slot's sync is CUDA's

    exp = Experiment("cart", outdir=tmp_path, dataroot=tmp_path)
    cart.main(exp, ["--episode-length", "40", "--min-slices", "4"])
    (log,) = exp.rate_logs()
    assert log.finished and log.syncs >= 2 and len(log.rates) >= 4
    assert exp.device == torch.device("cpu") and exp.metrics
    assert exp.efficiency is None or exp.efficiency.device_name in (None, "cpu")
    assert not torch.cuda.is_initialized()
