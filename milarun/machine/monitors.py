"""Monitors of a benchmark process: its GPUs through the device interface (load, memory,
temperature, power, energy counter, compute clock, clock-event reasons; the backend that
read them: milarun.machine.gpu) and its process tree's CPU use and memory through
psutil, each sampled in a daemon thread; "no samples" with the reason when there is nothing
to sample. Device discovery is milarun.machine.devices."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from milarun.machine import devices, gpu
from milarun.machine.gpu import base as gpu_base


class Monitor:
    """Samples ``probe()`` every ``interval`` seconds in a daemon thread."""

    def __init__(
        self,
        probe: Callable[[], dict[str, Any]],
        interval: float = 1.0,
        unavailable: str | None = None,
        backend: str | None = None,
        inventory: dict[str, dict[str, Any]] | None = None,
    ):
        self.probe = probe
        self.inventory = inventory  # what the backend says each sampled GPU is (GPU monitors)
        self.interval = interval
        self.unavailable = unavailable
        self.backend = backend  # the device backend that measured (GPU monitors)
        self.samples: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.time()

    def start(self) -> Monitor:
        if self.unavailable is None:
            self._thread = threading.Thread(target=self._loop, daemon=True, name="monitor")
            self._thread.start()
        return self

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                return

    def sample(self) -> None:
        try:
            sample = self.probe()
        except Exception as err:
            if len(self.errors) < 5:
                self.errors.append(str(err))
            return
        sample["t"] = round(time.time() - self._t0, 3)
        self.samples.append(sample)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        record: dict[str, Any] = {"interval": self.interval, "samples": self.samples}
        if self.backend is not None:
            record["backend"] = self.backend
        if self.inventory is not None:
            record["inventory"] = self.inventory
        if not self.samples:
            record["note"] = "no samples: " + (
                self.unavailable or "; ".join(self.errors) or "run ended before a sample"
            )
        elif self.errors:
            record["errors"] = self.errors
        return record


def gpu_monitor(
    backend: gpu.Backend | None = None, ids: list[str] | None = None, interval: float = 1.0
) -> Monitor:
    """Monitor of this instance's own GPUs through the machine's backend (NVML, AMD SMI):
    load, memory, temperature, power, energy counter, compute clock and clock-event reasons,
    with the readings' wall-clock ``time``; its record names the backend."""
    if ids is None:
        label = devices.instance_device_label()
        # A plain `milarun run` on a GPU machine (no CUDA_VISIBLE_DEVICES) uses, and so
        # monitors, the GPU its label names.
        on_gpu = label.startswith(devices.GPU_KIND)
        ids = (devices.visible_ids() or [label.split(":", 1)[1]]) if on_gpu else []
    if not ids:
        return Monitor(dict, interval, unavailable="no GPU assigned to this instance")
    if backend is None:
        backend = gpu.load()
    if not backend.usable:
        return Monitor(dict, interval, unavailable=backend.reason, backend=backend.name)
    try:
        handles = {i: backend.handle(i) for i in ids}
    except Exception as err:
        why = f"{backend.label} cannot open GPU {ids}: {err}"
        return Monitor(dict, interval, unavailable=why, backend=backend.name)
    # The energy counter is the costliest reading: read only where the result is written,
    # not on a torchrun rank other than 0.
    energy = os.environ.get("RANK", "0") == "0"
    readers = {gid: backend.reader(h, energy) for gid, h in handles.items()}
    inventory = gpu_inventory(backend, handles)

    def probe() -> dict[str, Any]:
        out = {}
        # Wall clock of the readings, so milarun.measure.energy can place them in the steady window.
        now = time.time()
        for gid, read in readers.items():
            reading = read()
            if all(v is None for v in reading.values()):
                raise RuntimeError(f"{backend.label} gave no reading for GPU {gid}")
            out[gid] = reading
        return {"gpus": out, "time": now}

    return Monitor(probe, interval, backend=backend.name, inventory=inventory)


def gpu_inventory(backend: gpu.Backend, handles: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What the backend says each GPU the monitor samples is (its id as sampled -> name,
    UUID, memory in MiB, PCI device id; None where not read), read once at the start from
    those GPUs alone: the device the samples are of, which verify compares with the run's
    system record."""
    return {gid: _inventory_entry(backend, handle) for gid, handle in handles.items()}


def _inventory_entry(backend: gpu.Backend, handle: Any) -> dict[str, Any]:
    read = gpu_base.read  # a reading the GPU or driver does not give: None
    memory = read(lambda: backend.memory(handle))
    return {
        "name": read(lambda: backend.device_name(handle)),
        "uuid": read(lambda: backend.uuid(handle)),
        "memory_mb": memory / 2**20 if isinstance(memory, int) else None,
        "pci_device_id": read(lambda: backend.pci_device_id(handle)),
    }


CHILDREN_REFRESH = 10.0  # seconds between listings of the test's child processes


def _busy_seconds(t: Any) -> float:
    """A CPU's non-idle seconds (iowait is idle; steal counts: the host took the CPU)."""
    return float(
        t.user
        + t.nice
        + t.system
        + getattr(t, "irq", 0.0)
        + getattr(t, "softirq", 0.0)
        + getattr(t, "steal", 0.0)
    )


def cpus_busy_seconds(cpus: list[int]) -> float:
    """The non-idle seconds so far of these CPUs (cumulative, from /proc/stat via psutil)."""
    import psutil

    per_cpu = psutil.cpu_times(percpu=True)
    return sum(_busy_seconds(per_cpu[c]) for c in cpus if c < len(per_cpu))


def others_share(cpus: int, wall: float, busy: float, own: float) -> float:
    """The share (0-1) of ``cpus`` CPUs' time over ``wall`` seconds that went to other
    processes (and steal): their busy seconds less our own CPU seconds over that time."""
    return min(max((busy - own) / (wall * cpus), 0.0), 1.0) if wall > 0 and cpus > 0 else 0.0


class OthersShare:
    """From its making on: the share of ``cpus`` that other processes (and the VM's host:
    steal) took, our own CPU seconds (``own``, a clock of them) set apart."""

    def __init__(self, cpus: list[int], own: Callable[[], float]) -> None:
        self.cpus, self.own = cpus, own
        self.started, self.busy, self.own_s = time.monotonic(), cpus_busy_seconds(cpus), own()

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def share(self) -> float:
        return others_share(
            len(self.cpus),
            self.seconds,
            cpus_busy_seconds(self.cpus) - self.busy,
            self.own() - self.own_s,
        )


def tree_cpu_seconds() -> float:
    """This process's CPU seconds and its children's, once waited for (a clock of ``own``
    for OthersShare where the children's work is ours)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def cpu_monitor(interval: float = 1.0) -> Monitor:
    """psutil monitor of this process tree's CPU use and memory, and the host's RAM."""
    try:
        import psutil
    except ImportError as err:
        return Monitor(dict, interval, unavailable=f"psutil not installed ({err})")
    me = psutil.Process()
    me.cpu_percent(None)
    ours = sorted(os.sched_getaffinity(0))  # children inherit it: our tree runs only there
    # Listing children scans all of /proc holding the GIL against the test's own thread
    # (a rate error `milarun selftest` sees at short steps): refresh it every 10 s.
    children: list[Any] = []
    listed = [float("-inf")]

    def probe() -> dict[str, Any]:
        now = time.monotonic()
        if now - listed[0] >= CHILDREN_REFRESH:
            children[:] = me.children(recursive=True)
            listed[0] = now
        rss, own = 0, 0.0
        for p in (me, *children):
            try:
                rss += p.memory_info().rss
                # a reaped child's time moves into its parent's children_* fields
                t = p.cpu_times()
                own += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass
        busy = cpus_busy_seconds(ours)
        return {
            "time": time.time(),
            "cpu_percent": me.cpu_percent(None),
            "rss_mb": rss / 2**20,
            "ram_used_percent": psutil.virtual_memory().percent,
            # cumulative: milarun.measure.contention takes others' share over a window
            "cpus": len(ours),
            "cpus_busy_s": busy,
            "own_cpu_s": own,
            "load1": os.getloadavg()[0],
        }

    return Monitor(probe, interval)
