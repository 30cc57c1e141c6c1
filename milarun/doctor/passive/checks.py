"""`milarun doctor`: what to fix on a machine before a run, one line per check.

Checks, in order: the GPUs the device backend (NVML, AMD SMI) and torch see,
driver/CUDA/cuDNN/NCCL versions (HIP/RCCL on AMD) and each
GPU's health (``milarun.doctor.passive.gpu``); the student cgroups; with ``--profile``, the
data its tests read and the disk space the missing data needs; the bytecode of the big
packages. Each check is PASS, WARN (runs, but fix it), FAIL (fix it first) or INFO
(milarun.doctor.check). Everything doctor reads comes through :class:`Machine`, so tests
give fakes for the GPU libraries (NVML, amdsmi), torch, /dev, cgroups and the disk.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milarun import errors
from milarun.doctor.check import FAIL, INFO, PASS, STATUSES, WARN, Check, as_root
from milarun.doctor.passive.data import data_checks
from milarun.doctor.passive.gpu import inventory, versions
from milarun.doctor.passive.health import health
from milarun.machine import devices, gpu, gpuprobe, isolation, torchbuild
from milarun.machine.gpu import Backend, GpuInfo
from milarun.run import profile

__all__ = ["Machine", "Request", "run_checks", "render", "summary", "exit_code"]

WIDTH = 100
NAME_WIDTH = 18
BYTECODE_PACKAGES = ("torch", "pandas")  # the slow imports: ~10 s each without bytecode
COMPILED_ENOUGH = 0.95  # share of a package's modules with bytecode (a few never compile)
NBSP = "\u00a0"  # joins words while wrapping (textwrap splits on ASCII spaces only)
UNBROKEN = re.compile(r"`[^`]*`|\d[\d.]* (?:[kMG]i?B|W|C|MHz)\b")  # commands, 45.8 GB


def _probe_torch() -> gpuprobe.TorchGPUs:
    # Every GPU, as the backend lists them, whatever this shell's visible-devices hide.
    env = {k: v for k, v in os.environ.items() if k not in devices.VISIBLE_VARIABLES}
    return gpuprobe.torch_gpus(env=env)


def _disk_usage(path: str) -> Any:
    import psutil

    return psutil.disk_usage(path)


@dataclass
class Machine:
    """Where doctor looks; each field can be replaced by a fake."""

    backend: Backend = field(default_factory=lambda: gpu.plain("NVML not loaded"))
    torch: Callable[[], gpuprobe.TorchGPUs] = _probe_torch
    dev: Path = Path("/dev")
    hierarchies: Callable[[], dict[str, isolation.Hierarchy]] = isolation.find_hierarchies
    disk_usage: Callable[[str], Any] = _disk_usage  # -> an object with .free (bytes)
    packages: tuple[str, ...] = BYTECODE_PACKAGES

    @classmethod
    def here(cls) -> Machine:
        return cls(backend=gpu.load())


@dataclass(frozen=True)
class Request:
    dataroot: Path
    profile: str | None = None  # None: the data checks are skipped
    devices: str | None = None  # as `jobs --devices`; None: what `jobs` would use


def run_checks(request: Request, machine: Machine) -> Iterator[Check]:
    """The checks, one at a time (the torch probe takes seconds). A bad profile or device
    spec raises ProfileError / DeviceSpecError here, before any check."""
    prof = profile.load_profile(request.profile) if request.profile else None
    chosen = devices.parse_device_spec(request.devices) if request.devices else None
    return _checks(request, machine, prof, chosen)


def _checks(
    request: Request,
    machine: Machine,
    prof: profile.Profile | None,
    chosen: list[devices.Device] | None,
) -> Iterator[Check]:
    torch = machine.torch()
    found, gpus = inventory(machine.backend, torch, gpuprobe.device_files(machine.dev))
    yield from found
    yield versions(machine.backend, torch, gpus)
    if chosen is None:  # what `jobs` would take: the backend's GPUs, else one CPU slice
        chosen = (
            devices.discover_devices(machine.backend) if gpus else devices.parse_device_spec("cpu")
        )
    selected, unknown = _select(gpus, chosen, machine.backend)
    yield from unknown
    yield from health(machine.backend, selected)
    yield from cgroup_checks(chosen, request.devices, machine)
    if prof is None:
        yield Check("data", INFO, "not checked: give --profile NAME (quick, standard, ...)")
        yield disk_check(request.dataroot, {}, machine.disk_usage, None)
    else:
        checks, missing = data_checks(prof, request.dataroot)
        yield from checks
        yield disk_check(request.dataroot, missing, machine.disk_usage, prof.name)
    yield bytecode_check(machine.packages)
    cpu_only = torchbuild.cpu_only_problem()
    if cpu_only:  # a CPU-only install (docs/install.md) whose torch a sync replaced
        yield Check("torch build", FAIL, cpu_only)


def _select(
    gpus: list[GpuInfo], chosen: list[devices.Device], backend: Backend
) -> tuple[list[GpuInfo], list[Check]]:
    """The GPUs whose health is checked: those --devices names, else every one."""
    if not gpus or chosen[0].kind != devices.GPU_KIND:
        return gpus, []
    by_id = {**{str(g.index): g for g in gpus}, **{g.uuid: g for g in gpus}}
    unknown = [d.id for d in chosen if d.id not in by_id]
    if unknown:
        return [by_id[d.id] for d in chosen if d.id in by_id], [
            Check(
                "devices",
                FAIL,
                f"{backend.label} has no GPU {', '.join(unknown)} (it sees "
                f"{', '.join(str(g.index) for g in gpus)})",
                f"give ids that {backend.list_command} lists",
            )
        ]
    return [by_id[d.id] for d in chosen], []


# -- student cgroups -------------------------------------------------------------------------
def _spec(devs: list[devices.Device]) -> str:
    if devs[0].kind == devices.CPU_KIND:
        return f"cpu:{len(devs)}"
    return ",".join(d.id for d in devs)


def cgroup_checks(devs: list[devices.Device], spec: str | None, machine: Machine) -> list[Check]:
    """The student groups `jobs` would run these devices in: present, with disjoint CPUs
    (the same plan and paths as `milarun cgroups check`)."""
    spec = spec or _spec(devs)
    hier = machine.hierarchies()
    setup = (
        f"{as_root(f'cgroups setup --devices {spec}')} "
        f"(or `scripts/cgroup_setup.sh --devices {spec}` as root)"
    )
    absent = [c for c in isolation.CONTROLLERS if c not in hier]
    if absent:
        return [
            Check(
                "cgroups",
                WARN,
                f"controller {', '.join(absent)} not available: "
                "instances would run without student isolation",
                "mount cgroup v1 cpuset and memory, or enable both in cgroup v2",
            )
        ]
    ids = [d.id for d in devs]
    local = (
        devices.gpu_local_cpus(ids, machine.backend)
        if devs[0].kind == devices.GPU_KIND and machine.backend.usable
        else {}
    )
    try:
        students = isolation.machine_plan(ids, hier, local)
    except errors.IsolationError as err:
        return [
            Check(
                "cgroups",
                WARN,
                f"{err}: no student groups possible",
                "benchmark fewer devices at once (--devices)",
            )
        ]
    dirs = {
        (s.name, c): hier[c].dir(isolation.student_path(hier[c], s.name))
        for s in students
        for c in isolation.CONTROLLERS
    }
    missing = [
        f"{c}:{isolation.student_path(hier[c], name)}"
        for (name, c), d in dirs.items()
        if not d.is_dir()
    ]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        shown = ", ".join(missing[:3]) + more
        return [
            Check(
                "cgroups",
                WARN,
                f"student groups missing: {shown}; instances would "
                "run unisolated (or, for a profile that requires them, not at all)",
                setup,
            )
        ]
    cpus = {
        s.name: isolation.parse_cpu_list(
            isolation.read_file(dirs[s.name, "cpuset"] / "cpuset.cpus") or ""
        )
        for s in students
    }
    checks = [_disjoint(cpus, spec)]
    if any(h.version == 1 for h in hier.values()) and shutil.which("cgexec") is None:
        checks.append(
            Check(
                "cgroup tools",
                WARN,
                "cgexec not found: v1 groups are entered through it",
                "install cgroup-tools (`apt install cgroup-tools`)",
            )
        )
    return checks


def _disjoint(cpus: dict[str, list[int]], spec: str) -> Check:
    redo = (
        f"{as_root(f'cgroups teardown --devices {spec}')}, then `... cgroups "
        f"setup --devices {spec}`"
    )
    empty = [name for name, c in cpus.items() if not c]
    if empty:
        return Check("cgroups", FAIL, f"{', '.join(empty)}: no CPUs set", redo)
    names = list(cpus)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = sorted(set(cpus[a]) & set(cpus[b]))
            if shared:
                return Check(
                    "cgroups",
                    FAIL,
                    f"{a} and {b} share CPUs {isolation.cpu_list(shared)}: students would compete",
                    redo,
                )
    shown = ", ".join(f"{n} {isolation.cpu_list(c)}" for n, c in cpus.items())
    return Check("cgroups", PASS, f"disjoint CPUs: {shown}")


def _bytes(n: float) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB"
    return f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def disk_check(
    root: Path,
    missing: dict[str, float],
    disk_usage: Callable[[str], Any],
    profile_name: str | None,
) -> Check:
    """Free space where the data goes, against what the missing data needs."""
    where = Path(root).absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    free = disk_usage(str(where)).free
    detail = f"{_bytes(free)} free for {root}"
    if profile_name is None:
        return Check("disk", INFO, detail + " (give --profile to compare with its data)")
    need = sum(missing.values())
    if not need:
        return Check("disk", PASS, detail + f"; {profile_name}'s data is all there")
    parts = ", ".join(f"{name} {_bytes(n)}" for name, n in missing.items())
    detail += f"; the missing data needs about {_bytes(need)} ({parts})"
    if free < need:
        return Check(
            "disk",
            WARN,
            detail,
            "free space, or put the data on a bigger disk (-d DIR or MILARUN_DATAROOT)",
        )
    return Check("disk", PASS, detail)


# -- bytecode --------------------------------------------------------------------------------
def bytecode_check(packages: tuple[str, ...]) -> Check:
    """Bytecode for this interpreter in the big packages: without it every benchmark
    process recompiles them on import where PYTHONDONTWRITEBYTECODE is set."""
    tag = sys.implementation.cache_tag
    short, seen = [], []
    for name in packages:
        spec = importlib.util.find_spec(name)  # finds, does not import
        if spec is None or not spec.submodule_search_locations:
            continue
        seen.append(name)
        total = compiled = 0
        for base in spec.submodule_search_locations:
            for folder, _, files in os.walk(base):
                for f in files:
                    if f.endswith(".py"):
                        total += 1
                        source = os.path.join(folder, f)
                        compiled += os.path.exists(importlib.util.cache_from_source(source))
        if total and compiled < COMPILED_ENOUGH * total:
            short.append((name, compiled, total, base))
    if short:
        name, compiled, total, base = short[0]
        return Check(
            "bytecode",
            WARN,
            "; ".join(f"{n}: {c} of {t} modules compiled for {tag}" for n, c, t, _ in short),
            "`uv sync --compile-bytecode` (uv) or `poetry install --compile` (Poetry), or "
            f"`{sys.executable} -m compileall -q {base}`",
        )
    if not seen:
        return Check("bytecode", INFO, f"{', '.join(packages)} not installed")
    return Check("bytecode", PASS, f"{', '.join(seen)} compiled for {tag}")


# -- output ----------------------------------------------------------------------------------
def render(check: Check, width: int = WIDTH) -> str:
    """``STATUS  name  detail``, then ``fix: ...``, wrapped to ``width`` columns; neither
    a `command` that fits on a line (so it can be copied whole) nor a quantity is cut."""
    head = f"{check.status:<4}  {check.name:<{NAME_WIDTH}} "
    indent = " " * len(head)
    room = width - len(indent) - len("fix: ")

    def wrap(text: str, first: str, rest: str) -> list[str]:
        kept = UNBROKEN.sub(lambda m: m[0].replace(" ", NBSP) if len(m[0]) <= room else m[0], text)
        return [
            line.replace(NBSP, " ")
            for line in textwrap.wrap(
                kept,
                width,
                initial_indent=first,
                subsequent_indent=rest,
                break_long_words=False,
                break_on_hyphens=False,
            )
        ]

    lines = wrap(check.detail, head, indent)
    if check.fix:
        lines += wrap(f"fix: {check.fix}", indent, indent + " " * len("fix: "))
    return "\n".join(lines)


def summary(checks: list[Check]) -> str:
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    verdict = "not ready: fix the FAIL lines" if counts[FAIL] else "ready"
    return f"doctor: {verdict} ({', '.join(f'{n} {s}' for s, n in counts.items())})"


def exit_code(checks: list[Check]) -> int:
    """0 when nothing failed (warnings included), else 1."""
    return 1 if any(c.status == FAIL for c in checks) else 0
