"""`milarun jobs` on a machine of four MI300X, the supervisor's side (issue 41): the real CLI
in real subprocesses, with ROCm's ``amdsmi`` replaced by its fake (tests/fakes_amdsmi.py) on
the PYTHONPATH of the supervisor and of every instance. The GPUs the operator's
ROCR_VISIBLE_DEVICES leaves are found through AMD SMI, each instance gets its own by index,
and its result records what AMD SMI measured of it (the monitor, the energy counter, the
power limit) and the machine as AMD SMI lists it. The test itself trains on the CPU
(tests/benches/gpuslot.py): what the GPU computes only a real MI300X can show."""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import pytest

from conftest import BENCHES, ROOT, TESTS, milarun
from fakes_amdsmi import fake_amdsmi, mi300x
from milarun.machine import devices, gpuids, provenance
from milarun.machine.gpu.amd import AmdSmiBackend
from milarun.run import plan
from milarun.run.profile import load_profile

# ROCm's amdsmi for a subprocess: four MI300X at 700 W, at their power limit (PPT)
FAKE_AMDSMI = f"""
import sys
sys.path.append({str(TESTS)!r})
from fakes_amdsmi import fake_amdsmi, mi300x


def busy(i):
    g = mi300x(i, watts=lambda t: 700.0, ppt=lambda t: True)
    g["activity"]["gfx_activity"] = 100
    g["clock_info_gfx"]["clk"] = 2100
    return g


globals().update({{k: v for k, v in vars(fake_amdsmi([busy(i) for i in range(4)])).items()
                  if not k.startswith("__")}})
"""


def test_hip_visible_devices_wins_over_its_cuda_alias():
    """HIP reads CUDA_VISIBLE_DEVICES only where HIP_VISIBLE_DEVICES is unset (both number
    what ROCR_VISIBLE_DEVICES left), as torch's ROCm build does."""
    assert devices.visible_ids({"HIP_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "1"}) == [
        "0",
        "1",
    ]
    env = {"ROCR_VISIBLE_DEVICES": "1,2,3", "CUDA_VISIBLE_DEVICES": "0,2"}
    assert devices.visible_ids(env) == ["1", "3"]


@pytest.mark.slow
def test_jobs_on_four_mi300x_gives_each_instance_its_gpu_and_records_amds_figures(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "amdsmi.py").write_text(FAKE_AMDSMI)
    profile = tmp_path / "slot.json"
    profile.write_text(
        json.dumps({"*": {"max_duration": 120}, "spin": {"experiment": "gpuslot:spin"}})
    )
    out = tmp_path / "out"
    env = {
        "PYTHONPATH": os.pathsep.join(map(str, (lib, BENCHES, ROOT))),
        "ROCR_VISIBLE_DEVICES": "1,3",  # the operator's: GPUs 1 and 3 of four
    }
    done = milarun("jobs", profile, "-o", out, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = {p.name: json.loads(p.read_text()) for p in out.glob("slot.spin.*.json")}
    assert sorted(r["device"] for r in results.values()) == ["cuda:1", "cuda:3"]
    for result in results.values():
        gid = result["device"].split(":")[1]
        # by AMD SMI's index (its UUIDs are not HIP's), the operator's variables gone
        assert result["environ"]["CUDA_VISIBLE_DEVICES"] == gid
        assert not {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"} & set(result["environ"])
        (identity,) = result["gpu_identity"]
        assert identity["id"] == gid and identity["pci_bus_id"] == f"0000:{gid}c:00.0"
        assert result["gpu"] == "AMD Instinct MI300X"
        assert (
            result["system"]["gpu_backend"] == "amdsmi" and result["system"]["driver"] == "6.10.5"
        )
        monitor = result["gpu_monitor"]
        assert monitor["backend"] == "amdsmi" and monitor["samples"]
        assert all(list(s["gpus"]) == [gid] for s in monitor["samples"])  # its own GPU only
        energy = result["energy"]
        assert energy["backend"] == "amdsmi" and energy["method"] == "counter"
        assert energy["watts"] == pytest.approx(700.0, rel=0.01)  # AMD SMI's energy counter
        throttle = result["diagnostics"]["train"]["throttle"]
        assert throttle["fault_slices"] == 0
        assert throttle["gpus"][f"cuda:{gid}"]["reasons"] == {
            "SwPowerCap": throttle["window_slices"]
        }
        assert throttle["gpus"][f"cuda:{gid}"]["sm_clock_mhz"] == 2100
    (kept,) = out.glob(".milarun-run.*.sysinfo")
    machine = json.loads(kept.read_text())
    assert machine["system"]["gpu_backend"] == "amdsmi"
    assert [g["name"] for g in machine["system"]["gpus"]] == ["AMD Instinct MI300X"] * 4
    assert machine["provenance"]["collective"] == "RCCL"
    # the report that `jobs` printed: AMD's figures in the H100's sections
    assert "GPU backend: amdsmi" in done.stdout and "4 x AMD Instinct MI300X" in done.stdout
    assert "Energy over the steady window" in done.stdout


RCCL_H = (
    '#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n#define NCCL_SUFFIX ""\n'
)


def test_the_machine_record_gives_rccls_version_on_amd(tmp_path, monkeypatch):
    """RCCL (ROCm's NCCL, numbered by the NCCL API it implements) from the ROCm install's
    rccl.h, read without importing torch, or from torch's ROCm build where it is loaded."""
    rocm = tmp_path / "rocm"
    (rocm / "include" / "rccl").mkdir(parents=True)
    (rocm / "include" / "rccl" / "rccl.h").write_text(RCCL_H)
    monkeypatch.setenv("ROCM_PATH", str(rocm))
    backend = AmdSmiBackend(fake_amdsmi([mi300x()]))
    found = provenance.record(backend)
    assert found["collective"] == "RCCL" and found["nccl"] == "2.21.5"
    assert backend.collective_version(tmp_path / "no-rocm") is None
    rocm_torch = SimpleNamespace(
        version=SimpleNamespace(hip="6.4.43482"),
        cuda=SimpleNamespace(nccl=SimpleNamespace(version=lambda: (2, 22, 3))),
    )
    monkeypatch.setitem(sys.modules, "torch", rocm_torch)
    assert backend.collective_version(tmp_path / "no-rocm") == "2.22.3"


def test_jobs_modern_plans_each_instance_on_its_mi300x(tmp_path, monkeypatch):
    """`jobs modern` on four MI300X with the operator's HIP_VISIBLE_DEVICES=0,2,3, as planned
    before any instance starts: each per-GPU test on its GPU by AMD SMI's index, the scaling
    test's rounds on the first k of them, ROCm's variables gone (CUDA_VISIBLE_DEVICES, which
    HIP reads where they are unset, names the GPUs among all of them)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0,2,3")
    backend = AmdSmiBackend(fake_amdsmi([mi300x(i) for i in range(4)]))
    devs = gpuids.resolve_gpus(devices.discover_devices(backend), backend)
    opts = plan.LaunchOptions(outdir=tmp_path, dataroot=tmp_path, use_cgexec=False)
    jobs = load_profile("modern").jobs
    for job in jobs.values():
        if job.partition == "gpu-progression":
            rounds = plan.plan_progression(job, 0, devs, opts)
            seen = [(i.name, i.env["CUDA_VISIBLE_DEVICES"]) for (i,) in rounds]
            assert seen == [(f"{job.fullname}.{k}", ",".join("023"[:k])) for k in (1, 2, 3)]
            instances = [i for (i,) in rounds]
        else:
            instances = plan.plan_instances(job, 0, devs, opts)
            assert [i.env["CUDA_VISIBLE_DEVICES"] for i in instances] == ["0", "2", "3"]
            assert [i.job_id for i in instances] == ["0.0", "0.2", "0.3"]
        for instance in instances:
            assert "HIP_VISIBLE_DEVICES" not in instance.env, instance.tag
            assert "ROCR_VISIBLE_DEVICES" not in instance.env, instance.tag
            buses = instance.env[devices.BUS_IDS_ENV].split(",")
            assert buses == [
                f"0000:{gid}c:00.0" for gid in instance.env["CUDA_VISIBLE_DEVICES"].split(",")
            ]
