"""`milarun doctor`: the real command on this machine, then every check against fakes.

The fakes are built from ``tests/data/nvml_h100.json``, a real H100's NVML and torch
readings: a healthy H100 host must pass everything, and each fault seeded into a copy of
those readings must give the status an operator needs.
"""

from __future__ import annotations

import ast
import compileall
import copy
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT, milarun
from fakes import H100, FakeNVML
from milabench import datasets as ds
from milarun.doctor.check import FAIL, INFO, PASS, WARN, Check
from milarun.doctor.passive.checks import (
    Machine,
    Request,
    bytecode_check,
    exit_code,
    render,
    run_checks,
)
from milarun.doctor.passive.gpu import cudnn_text
from milarun.machine import gpu, isolation
from milarun.machine.gpu.nvml import NvmlBackend
from milarun.machine.gpuprobe import TorchGPUs


def h100(**changes) -> dict:
    """The H100's NVML readings, with ``changes``."""
    return {**copy.deepcopy(H100), **changes}


def torch_entry(gpu: dict, index: int = 0) -> dict:
    """What gpuprobe's child reports for a GPU (torch's own readings in the H100 file)."""
    return {
        "index": index,
        "name": H100["torch_name"],
        "memory": H100["torch_memory"],
        "uuid": gpu["uuid"],
        "pci_bus_id": gpu["pci_bus_id"],
    }


TORCH_VERSIONS = {
    "torch": H100["torch"],
    "cuda": H100["torch_cuda"],
    "hip": None,
    "cudnn": H100["cudnn"],
    "nccl": ".".join(map(str, H100["nccl"])),
}


def torch_sees(*entries: dict, **versions) -> TorchGPUs:
    return TorchGPUs(tuple(entries), {**TORCH_VERSIONS, **versions})


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A machine of fakes: healthy H100s, student groups set up, an empty /dev, 1 TB free,
    one package, compiled (the real torch may have no bytecode where these tests run)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    package = tmp_path / "site" / "compiled_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    compileall.compile_dir(package, quiet=1)
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.delenv(isolation.PARENT_ENV, raising=False)
    cgroups = tmp_path / "cgroup"
    cgroups.mkdir()
    dev = tmp_path / "dev"
    dev.mkdir()

    def make(
        gpus: list[dict] | None = None,
        torch: TorchGPUs | None = None,
        students: dict[str, str] | None = None,
        **fields,
    ) -> Machine:
        gpus = [h100()] if gpus is None else gpus
        torch = (
            torch_sees(*(torch_entry(g, i) for i, g in enumerate(gpus))) if torch is None else torch
        )
        for name, cpus in (students if students is not None else {"student0": "0"}).items():
            (cgroups / name).mkdir(exist_ok=True)
            (cgroups / name / "cpuset.cpus").write_text(cpus)
        hier = {c: isolation.Hierarchy(c, 2, cgroups, "/") for c in isolation.CONTROLLERS}
        options = dict(
            backend=(
                NvmlBackend(FakeNVML(gpus))
                if gpus
                else gpu.plain("NVML unavailable: Driver Not Loaded")
            ),
            torch=lambda: torch,
            dev=dev,
            hierarchies=lambda: hier,
            disk_usage=lambda path: SimpleNamespace(free=10**12),
            packages=("compiled_pkg",),
        )
        return Machine(**{**options, **fields})

    make.dev = dev
    return make


def run(machine: Machine, tmp_path: Path, **request) -> list[Check]:
    return list(run_checks(Request(tmp_path / "data", **request), machine))


def named(checks: list[Check], name: str) -> Check:
    return next(c for c in checks if c.name == name)


def problems(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status in (WARN, FAIL)]


# -- the real command -------------------------------------------------------------------------
def test_doctor_on_this_cpu_machine_says_no_gpu_and_exits_0(tmp_path):
    if gpu.load().usable:
        pytest.skip("this machine has NVML")
    done = milarun("doctor", "-d", tmp_path, timeout=120)  # the real torch probe
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no GPU: this machine benchmarks CPU slices (--devices cpu:N)" in done.stdout
    assert "versions" in done.stdout and "bytecode" in done.stdout
    assert "not checked: give --profile" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("doctor: ready")
    assert max(map(len, done.stdout.splitlines())) <= 100


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--profile", "nope"], "profile 'nope' not found"),
        (["--devices", "0,x"], "is not a device list"),
        (["--", "extra"], "doctor takes no arguments after --"),
    ],
)
def test_bad_input_is_one_line(args, fragment):
    done = milarun("doctor", *args, timeout=300)
    assert done.returncode == 1
    assert fragment in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


# -- GPUs: NVML and torch ---------------------------------------------------------------------
def test_healthy_h100_passes_everything(host, tmp_path):
    checks = run(host(), tmp_path)
    assert problems(checks) == []
    assert named(checks, "GPUs").status == PASS
    assert named(checks, "gpu0").detail == (
        "NVIDIA H100 80GB HBM3, 79.6 GiB, bus "
        "00000000:00:06.0, GPU-a2325795-1c9f-084d-8b93-"
        "322f176dd787"
    )
    assert named(checks, "versions").detail == (
        "driver 580.159.04 (CUDA 13.0); torch 2.11.0+cu130: CUDA 13.0, cuDNN 9.19.0, NCCL 2.28.9"
    )
    assert named(checks, "gpu0 persistence").detail == "on"
    assert named(checks, "gpu0 MIG").detail == "off"
    assert named(checks, "gpu0 memory errors").detail.startswith("ECC on, no uncorrected")
    assert named(checks, "gpu0 pending pages").detail == "no row remaps pending"
    assert named(checks, "gpu0 clocks").detail == (
        "SM 345 MHz now, max 1980, application 1980 MHz (an idle GPU clocks down)"
    )
    assert named(checks, "gpu0 power").detail == "limit 700 W, default 700 W"
    assert named(checks, "gpu0 PCIe").detail == "gen 5 x16 (max gen 5 x16)"
    assert named(checks, "gpu0 temperature").detail == "38 C"
    assert named(checks, "cgroups").detail == "disjoint CPUs: student0 0"
    tag = sys.implementation.cache_tag
    assert named(checks, "bytecode").detail == f"compiled_pkg compiled for {tag}"
    assert exit_code(checks) == 0


def test_no_gpu_and_no_device_file_is_a_cpu_machine(host, tmp_path):
    for machine in (
        host(gpus=[], torch=torch_sees(cuda=None)),
        host(gpus=[], torch=torch_sees(), backend=NvmlBackend(FakeNVML([]))),
    ):
        checks = run(machine, tmp_path)
        gpu_lines = [c for c in checks if c.name.startswith("gpu")]
        assert named(checks, "GPUs").status == INFO and gpu_lines == []
        assert named(checks, "GPUs").detail == (
            "no GPU: this machine benchmarks CPU slices (--devices cpu:N)"
        )
        assert exit_code(checks) == 0


def test_nvml_failing_while_dev_has_nvidia0_fails(host, tmp_path):
    machine = host(gpus=[], torch=torch_sees())
    (host.dev / "nvidia0").touch()
    (host.dev / "nvidiactl").touch()  # not a GPU
    check = named(run(machine, tmp_path), "GPUs")
    assert check.status == FAIL
    assert "NVML unavailable: Driver Not Loaded" in check.detail
    assert f"{host.dev}/nvidia0 present" in check.detail and "nvidiactl" not in check.detail
    assert "nvidia-smi" in check.fix


def test_nvml_failing_while_torch_sees_gpus_fails(host, tmp_path):
    check = named(run(host(gpus=[], torch=torch_sees(torch_entry(h100()))), tmp_path), "GPUs")
    assert check.status == FAIL and "torch sees 1 GPU" in check.detail


def other_gpu(index: int = 1) -> dict:
    return h100(
        uuid=f"GPU-00000000-0000-0000-0000-00000000000{index}",
        pci_bus_id=f"00000000:00:0{6 + index}.0",
    )


@pytest.mark.parametrize("case", ["torch sees fewer", "other UUID and bus", "NVML sees fewer"])
def test_nvml_and_torch_disagreeing_fails(host, tmp_path, case):
    two = [h100(), other_gpu()]
    machine = {
        "torch sees fewer": lambda: host(gpus=two, torch=torch_sees(torch_entry(two[0]))),
        "other UUID and bus": lambda: host(torch=torch_sees(torch_entry(other_gpu()))),
        "NVML sees fewer": lambda: host(torch=torch_sees(*map(torch_entry, two, (0, 1)))),
    }[case]()
    checks = run(machine, tmp_path)
    check = named(checks, "GPUs")
    assert check.status == FAIL, check
    assert exit_code(checks) == 1
    if case == "torch sees fewer":
        assert check.detail.startswith("NVML sees 2, torch 1; torch lacks gpu1 GPU-0000")
    if case == "NVML sees fewer":
        assert "NVML lacks torch's cuda:1 GPU-0000" in check.detail


def test_torch_without_uuids_is_matched_by_pci_bus(host, tmp_path):
    entry = {**torch_entry(h100()), "uuid": "", "pci_bus_id": "0000:00:06.0"}
    assert named(run(host(torch=torch_sees(entry)), tmp_path), "GPUs").status == PASS


@pytest.mark.parametrize(
    "cuda, status", [("13.0", PASS), ("12.4", PASS), ("13.1", WARN), ("14.0", FAIL), (None, FAIL)]
)
def test_torch_cuda_newer_than_the_driver(host, tmp_path, cuda, status):
    gpu = h100()
    check = named(run(host(torch=torch_sees(torch_entry(gpu), cuda=cuda)), tmp_path), "versions")
    assert check.status == status, check


def test_torch_that_does_not_import_fails_once(host, tmp_path):
    broken = TorchGPUs(
        error="torch probe failed (exit 1): ModuleNotFoundError: No module named 'torch'"
    )
    checks = run(host(torch=broken), tmp_path)
    assert named(checks, "GPUs").status == INFO  # NVML's GPUs are still listed and checked
    assert (
        named(checks, "versions").status == FAIL
        and "No module named" in named(checks, "versions").detail
    )
    assert [c.name for c in checks if c.status == FAIL] == ["versions"]
    assert named(checks, "gpu0 power").status == PASS


@pytest.mark.parametrize(
    "number, text", [(91900, "9.19.0"), (90100, "9.1.0"), (8902, "8.9.2"), (None, "none")]
)
def test_cudnn_version_numbers(number, text):
    assert cudnn_text(number) == text


# -- each GPU's health -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes, name, status, words",
    [
        ({"ecc_uncorrected_volatile": 3}, "memory errors", FAIL, ["3 uncorrected", "-r"]),
        ({"persistence": 0}, "persistence", WARN, ["off", "nvidia-smi -i 0 -pm 1"]),
        ({"mig": [1, 1]}, "MIG", WARN, ["enabled", "whole GPUs", "-mig 0"]),
        ({"remapped_rows": [0, 2, 1, 0]}, "pending pages", WARN, ["pending a reset"]),
        ({"remapped_rows": [0, 2, 0, 1]}, "pending pages", FAIL, ["RMA"]),
        ({"app_clock_sm": 1500, "default_app_clock_sm": 1980}, "clocks", WARN, ["-rac"]),
        (
            {"enforced_power_limit_mw": 500000},
            "power",
            WARN,
            ["limit 500 W, default 700 W", "nvidia-smi -i 0 -pl 700"],
        ),
        ({"pcie_width": 8}, "PCIe", WARN, ["gen 5 x8 (max gen 5 x16)", "lanes", "slot"]),
        ({"pcie_gen": 1}, "PCIe", WARN, ["gen 1 x16", "idle GPU may lower its link generation"]),
        ({"temperature": 84, "slowdown_temperature": 87}, "temperature", WARN, ["84 C", "cooling"]),
    ],
)
def test_a_fault_on_one_gpu(host, tmp_path, changes, name, status, words):
    checks = run(host([h100(), {**other_gpu(), **changes}], students={}), tmp_path, devices="0,1")
    check = named(checks, f"gpu1 {name}")
    assert check.status == status, check
    text = f"{check.detail} {check.fix}"
    assert all(w.replace("-i 0", "-i 1") in text for w in words), text
    assert named(checks, f"gpu0 {name}").status == PASS  # the healthy one stays healthy
    assert exit_code(checks) == (status == FAIL)


def test_power_limit_lowered_and_pcie_x8_warn_but_pass(host, tmp_path):
    checks = run(host([h100(enforced_power_limit_mw=450000, pcie_width=8)]), tmp_path)
    assert {c.name for c in problems(checks)} == {"gpu0 power", "gpu0 PCIe"}
    assert exit_code(checks) == 0


def test_devices_selects_the_gpus_checked(host, tmp_path):
    checks = run(host([h100(), other_gpu()]), tmp_path, devices="1")
    assert not any(c.name.startswith("gpu0 ") for c in checks)
    assert named(checks, "gpu1 power").status == PASS
    unknown = named(run(host(), tmp_path / "b", devices="3"), "devices")
    assert unknown.status == FAIL and "no GPU 3" in unknown.detail


# -- cgroups ---------------------------------------------------------------------------------
def test_missing_student_groups_warn_with_the_setup_command(host, tmp_path):
    check = named(run(host(students={}), tmp_path), "cgroups")
    assert check.status == WARN and "student groups missing: cpuset:/student0" in check.detail
    assert "milarun cgroups setup --devices 0" in check.fix


def test_overlapping_student_groups_fail(host, tmp_path):
    machine = host([h100(), other_gpu()], students={"student0": "0-1", "student1": "1"})
    check = named(run(machine, tmp_path), "cgroups")
    assert check.status == FAIL and "student0 and student1 share CPUs 1" in check.detail
    assert "teardown --devices 0,1" in check.fix


def test_cgroup_controllers_absent_is_a_warning(host, tmp_path):
    check = named(run(host(hierarchies=lambda: {}), tmp_path), "cgroups")
    assert check.status == WARN and "cpuset, memory not available" in check.detail


# -- data, disk and bytecode -----------------------------------------------------------------
def test_quick_profile_data(host, tmp_path):
    root = tmp_path / "data"
    ds.mark_complete(ds.resolve("mnist").folder(root), True, size=1200, seed=0)
    ds.mark_complete(ds.resolve("bsds500").folder(root), True, size=4, seed=0)  # quick: 16
    ds.mark_complete(ds.resolve("coco").folder(root), False)  # the real data
    partial = ds.resolve("wiki2").folder(root)
    partial.mkdir(parents=True)
    (partial / ds.PARTIAL).write_text(json.dumps({"synthetic": True, "size": 20000, "seed": 0}))
    checks = run(host(), tmp_path, profile="quick")

    assert named(checks, "data mnist").status == PASS
    assert named(checks, "data mnist").detail == (
        f"1200 synthetic examples in {root}/MNIST; read by vae"
    )
    assert named(checks, "data coco").status == PASS
    smaller = named(checks, "data bsds500")
    assert smaller.status == WARN and "already holds 4 synthetic examples" in smaller.fix
    interrupted = named(checks, "data wiki2")
    assert interrupted.status == FAIL
    assert f"--synthetic --size 20000 --seed 0 -d {root}" in interrupted.fix
    missing = named(checks, "data fake_imagenet")  # quick's prepare step makes it
    assert missing.status == INFO
    assert missing.detail == (
        f"not in {root}/ImageNet yet; `jobs quick` makes it first; read "
        "by loader, convnet, convnet_fp16, dcgan, fast_style"
    )
    assert missing.fix == (
        f"`milarun dataset fake_imagenet --synthetic --size 256 -d {root}` "
        "(what `jobs quick` runs first)"
    )
    assert {c.name for c in checks if c.status == FAIL} == {"data wiki2"}
    disk = named(checks, "disk")
    assert disk.status == PASS and "fake_imagenet 45 MB" in disk.detail
    assert exit_code(checks) == 1


def test_standard_data_needs_more_disk_than_is_free(host, tmp_path):
    machine = host(disk_usage=lambda path: SimpleNamespace(free=5 * 10**9))
    checks = run(machine, tmp_path, profile="standard")
    missing = named(checks, "data fake_imagenet")
    assert missing.fix.startswith(f"`milarun dataset fake_imagenet -d {tmp_path / 'data'}`")
    disk = named(checks, "disk")
    assert disk.status == WARN and "5.0 GB free" in disk.detail
    assert "fake_imagenet 17.6 GB" in disk.detail and "-d DIR" in disk.fix


def test_profile_without_data_passes_the_data_check(host, tmp_path):
    profile = tmp_path / "toys.json"
    profile.write_text(json.dumps({"poly": {"experiment": "milabench.models.polynome:main"}}))
    checks = run(host(), tmp_path, profile=str(profile))
    assert named(checks, "data").detail == "no test of toys reads a dataset"
    assert named(checks, "disk").status == PASS


def test_every_dataset_a_model_imports_is_in_the_table():
    for path in sorted((ROOT / "milabench" / "models").glob("*.py")):
        imported = {
            alias.name
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module == "milabench.datasets"
            for alias in node.names
        }
        assert set(ds.READ_BY.get(f"milabench.models.{path.stem}", ())) == imported, path.name
    assert set(ds.DISK_BYTES) == set(ds.known())


def test_a_package_without_bytecode_warns(tmp_path, monkeypatch):
    package = tmp_path / "uncompiled_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "module.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    check = bytecode_check(("uncompiled_pkg",))
    assert check.status == WARN and "uncompiled_pkg: 0 of 2 modules compiled" in check.detail
    assert "uv sync" in check.fix and "compileall" in check.fix


# -- output ----------------------------------------------------------------------------------
def test_lines_fit_100_columns_and_commands_stay_whole():
    check = Check(
        "data fake_imagenet",
        FAIL,
        "word " * 40,
        "run " * 12 + "`milarun dataset fake_imagenet --synthetic -d /data`",
    )
    text = render(check)
    assert max(map(len, text.splitlines())) <= 100
    assert "`milarun dataset fake_imagenet --synthetic -d /data`" in text
    assert text.splitlines()[0].startswith("FAIL  data fake_imagenet word")
