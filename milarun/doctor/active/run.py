"""`milarun doctor --active quick|full`: measured checks of every device of this machine.

One probe child per device (``python -m milarun.doctor.active.probe``, where torch is imported),
all at once, as `jobs` runs its instances: each GPU with ``CUDA_VISIBLE_DEVICES`` set to it,
each CPU slice in its student cgroup (else pinned to the slice's CPUs). While they run,
the device backend (NVML, AMD SMI) is sampled (clocks, throttle reasons, the PCIe link, XID
events); its error counters are read before and after. On a node with two or more GPUs a
node child then measures the GPU pairs and the NCCL (RCCL on ROCm) all-reduce. Every child
is bounded by a timeout and killed with its process group past it; a child that crashes,
hangs or raises is a FAIL. The verdicts are milarun.doctor.active.judge's (judge_cpu's,
judge_node's). This module imports no torch.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from milarun import errors
from milarun.doctor.active import judge, judge_cpu, judge_fingerprint, judge_node, record
from milarun.doctor.active.children import Child, barrier, make_child, run_children
from milarun.doctor.active.load_watch import LoadWatch
from milarun.doctor.check import WARN, Check
from milarun.doctor.passive import dcgm
from milarun.machine import devices, gpu, isolation

LEVELS = ("quick", "full")
TIMEOUT = {"quick": 150.0, "full": 540.0}  # seconds a child may take (torch + CUDA start incl.)
PROBE = [sys.executable, "-m", "milarun.doctor.active.probe"]
CGROUP_SPEC = "cpuset,memory:student{CUDA_VISIBLE_DEVICES}"


@dataclass
class Setup:
    """What the active checks run on; the tests replace the probe command (a fake GPU
    child), the spec's sizes (bounded runs) and the timeout."""

    backend: gpu.Backend = field(default_factory=lambda: gpu.plain("not loaded"))
    probe: list[str] = field(default_factory=lambda: list(PROBE))
    spec: dict[str, Any] = field(default_factory=dict)  # added to every child's spec
    timeout: float | None = None  # None: TIMEOUT[level]
    hierarchies: Callable[[], dict[str, isolation.Hierarchy]] = isolation.find_hierarchies
    environ: dict[str, str] = field(default_factory=dict)  # added to every child's environ
    dcgmi: str | None = field(default_factory=lambda: shutil.which("dcgmi"))  # None: none
    cpu_slices: bool = True  # on a GPU machine, also each GPU's CPU slice


def level_of(text: str | None) -> str:
    level = text or "quick"
    if level not in LEVELS:
        raise errors.UsageError(f"--active {level}: use quick or full")
    return level


def _child(
    tmp: Path,
    probed: judge.Probed,
    spec: dict[str, Any],
    env: dict[str, str],
    setup: Setup,
    preexec: Callable[[], None] | None = None,
) -> Child:
    return make_child(
        tmp, probed, {**spec, **setup.spec}, {**env, **setup.environ}, setup.probe, preexec
    )


def _cpu_children(tmp: Path, devs: list[devices.Device], level: str, setup: Setup) -> list[Child]:
    """One CPU probe per slice, where `jobs` would run the device's instance: CPU slices, or
    the CPU slice of each GPU (its GPU-local CPUs first, as `cgroups setup` plans them)."""
    hier = setup.hierarchies()
    ids = [d.id for d in devs]
    gpu = devs[0].kind == devices.GPU_KIND
    local = devices.gpu_local_cpus(ids, setup.backend) if gpu and setup.backend.usable else {}
    try:
        students = isolation.machine_plan(ids, hier, local)
    except errors.IsolationError:  # fewer CPUs than slices: one slice each, shared
        cpus = sorted(os.sched_getaffinity(0))
        students = [isolation.Student(i, tuple(cpus), "0", 0) for i in ids]
    children = []
    for dev, student in zip(devs, students, strict=True):
        label = f"{dev.label} cpus" if gpu else dev.label
        probed = judge.Probed(label, "cpu", None, None, planned_cpus=list(student.cpus))
        preexec: Callable[[], None]
        prefix: list[str] = []
        try:
            place = isolation.placement(CGROUP_SPEC, dev.id, hier)
            preexec = partial(isolation.join_groups, place.v2_procs)
            prefix, probed.placement = place.prefix, place.spec
        except errors.IsolationError:  # no student group: pinned to the plan's CPUs
            preexec = partial(os.sched_setaffinity, 0, set(student.cpus))
            probed.placement = "pinned, no student group"
        env = {"CUDA_VISIBLE_DEVICES": "", "MILARUN_DEVICE": dev.label}
        threads = str(len(student.cpus))
        env.update(OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        spec = {"kind": "cpu", "level": level, "barrier": barrier(tmp, len(devs), "cpu")}
        child = _child(tmp, probed, spec, env, setup, preexec)
        child.argv = prefix + child.argv
        children.append(child)
    return children


def _gpus(
    devs: list[devices.Device], backend: gpu.Backend
) -> list[tuple[devices.Device, Any, str]]:
    """Each GPU, its handle and what its child's CUDA_VISIBLE_DEVICES names it by: NVML's
    UUID, or the index where the backend's UUIDs are not CUDA's (AMD SMI)."""
    found = []
    for dev in devs:
        try:
            handle = backend.handle(dev.id)
            uuid = backend.uuid(handle)
        except Exception as err:
            raise errors.DeviceSpecError(
                f"--devices: {backend.label} cannot open GPU {dev.id} ({err})"
            ) from None
        found.append((dev, handle, uuid if backend.selects_by_uuid else dev.id))
    return found


def _gpu_children(
    tmp: Path, gpus: list[tuple[devices.Device, Any, str]], level: str, setup: Setup
) -> list[Child]:
    backend = setup.backend
    lock = tmp / "host-link.lock"
    children = []
    for dev, handle, uuid in gpus:
        probed = judge.Probed(
            dev.label,
            "gpu",
            None,
            None,
            name=backend.device_name(handle),
            memory=backend.memory(handle),
            before=backend.counters(handle),
            link=backend.link(handle),
            library=backend.label,
            tools=backend.tools,
        )
        env = {
            "CUDA_VISIBLE_DEVICES": uuid,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "MILARUN_DEVICE": dev.label,
        }
        spec = {
            "kind": "gpu",
            "level": level,
            "device": "cuda:0",
            "lock": str(lock),
            "barrier": barrier(tmp, len(gpus), "gpu"),
        }
        children.append(_child(tmp, probed, spec, env, setup))
    return children


def measure(
    level: str,
    devs: list[devices.Device],
    setup: Setup,
    say: Callable[[str], None],
    probed: list[judge.Probed],
) -> Iterator[Check]:
    """Run the probes on these devices and yield the checks; what each probe measured is
    appended to ``probed``."""
    timeout = setup.timeout or TIMEOUT[level]
    with tempfile.TemporaryDirectory(prefix="milarun-doctor-") as folder:
        tmp = Path(folder)
        if devs[0].kind == devices.CPU_KIND:
            say(f"measuring {len(devs)} CPU slice(s) ({level}, at most {timeout:.0f} s)...")
            probed += run_children(_cpu_children(tmp, devs, level, setup), timeout)
            yield from judge_cpu.cpu_checks(probed)
            yield from judge_fingerprint.fingerprint_checks(probed)
            return
        if not setup.backend.usable:
            raise errors.DeviceSpecError(
                f"--devices {','.join(d.id for d in devs)} names GPUs, but "
                f"{setup.backend.reason}: give cpu:N on a machine without GPUs"
            )
        gpus = _gpus(devs, setup.backend)
        children = _gpu_children(tmp, gpus, level, setup)
        say(f"measuring {len(gpus)} GPU(s) ({level}, at most {timeout:.0f} s)...")
        handles = {dev.label: handle for dev, handle, _ in gpus}
        watch = LoadWatch(setup.backend, handles)
        probed += run_children(children, timeout, watch)
        for p, (_, handle, _) in zip(probed, gpus, strict=True):
            p.after = setup.backend.counters(handle)
            p.samples, p.xids = watch.samples[p.label], watch.xids[p.label]
            p.xid_error, p.others = watch.xid_error, watch.others
        yield from judge.gpu_checks(probed)
        yield from judge_fingerprint.fingerprint_checks(probed)
        if len(gpus) >= 2:
            collective = setup.backend.tools.collective
            say(f"measuring the {len(gpus)} GPUs together (P2P, {collective})...")
            probed.append(_node_probe(tmp, gpus, level, setup, timeout))
            yield from judge_node.node_checks(probed[-1])
        else:
            yield from judge_node.skipped(len(gpus), setup.backend.tools)
        if setup.cpu_slices:  # after the GPUs: their probes' own CPU threads are done
            say(f"measuring the CPU slice of each GPU ({len(devs)})...")
            try:
                slices = run_children(_cpu_children(tmp, devs, level, setup), timeout)
            except (OSError, errors.UserError) as err:  # the GPUs' findings stand
                yield Check("cpu slices", WARN, f"not measured: {err}")
            else:
                probed += slices
                yield from judge_cpu.cpu_checks(slices)
                yield from judge_fingerprint.fingerprint_checks(slices)
        if setup.dcgmi:
            say(f"dcgmi diag -r {dcgm.RUN_LEVEL[level]}...")
        yield dcgm.diag(setup.dcgmi, level)


def _node_probe(
    tmp: Path, gpus: list[tuple[devices.Device, Any, str]], level: str, setup: Setup, timeout: float
) -> judge.Probed:
    """The node child: every GPU of the node together (P2P pairs, NCCL all-reduce)."""
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(u for _, _, u in gpus),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    probed = judge.Probed("node", "node", None, None, tools=setup.backend.tools)
    probed.name = setup.backend.device_name(gpus[0][1])  # the collective's datasheet row
    node = _child(tmp, probed, {"kind": "node", "level": level}, env, setup)
    return run_children([node], timeout)[0]


def run(
    level: str,
    spec: str | None,
    setup: Setup,
    say: Callable[[str], None],
    emit: Callable[[Check], None],
    before: tuple[Check, ...] = (),
) -> dict[str, Any]:
    """The active checks of the devices ``spec`` names (default: every GPU, else one CPU
    slice), each check given to ``emit`` as it comes; returns the record (``before``: the
    passive checks run first, recorded ahead of these)."""
    started, clock = time.time(), time.monotonic()
    devs = devices.parse_device_spec(spec) if spec else devices.discover_devices(setup.backend)
    checks: list[Check] = []
    probed: list[judge.Probed] = []
    for check in measure(level, devs, setup, say, probed):
        checks.append(check)
        emit(check)
    label = spec or (
        f"cpu:{len(devs)}" if devs[0].kind == devices.CPU_KIND else ",".join(d.id for d in devs)
    )
    seconds = time.monotonic() - clock
    return record.build(level, label, [*before, *checks], probed, started, seconds)
