"""What the device backend tells about a GPU around and during `doctor --active`'s load (no
torch here): a thread reading, every ``interval`` seconds while the probes run, each GPU's
compute clock, clock event (throttle) reasons, temperature, power, utilisation and the PCIe
link it trained at and the processes on it (where the backend lists them), the critical
error events (XIDs) the backend reports, and the share of the probes' CPUs other processes
took meanwhile (milarun.doctor.active.busy). The error counters read before and after the
load, the link's maximum and the memory are the backend's (milarun.machine.gpu: NVML, AMD
SMI; None where not given).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from milarun.doctor.active.busy import MIN_SPAN
from milarun.machine import gpu, monitors
from milarun.machine.gpu import base
from milarun.results import throttle

# Clock event (throttle) reasons, the backends' bits (NVML's), and what each means here: the
# slowdowns as milarun.results.throttle names them (the report and the tender say the same),
# and the settings that are no slowdown.
REASONS = {
    0x1: "idle",
    0x2: "application clocks setting",
    0x10: "sync boost",
    0x100: "display clock setting",
    **{bit: throttle.REASON_TEXT[name] for bit, name in throttle.BITS.items()},
}
# A thermal, hardware or power-brake slowdown FAILs, as the tender's throttle rule FAILs it
# (results.throttle.FAULTS); the power cap is the operating point.
BAD_REASONS = throttle.FAULT_BITS
WARN_REASONS = 0


def _uuid(backend: gpu.Backend, handle: Any) -> str | None:
    return base.read(lambda: backend.uuid(handle))


class LoadWatch:
    """Samples every GPU in ``handles`` (label -> the backend's handle) on a thread until
    stopped."""

    def __init__(
        self, backend: gpu.Backend, handles: dict[str, Any], interval: float = 0.25
    ) -> None:
        self.backend = backend
        self.handles = handles
        self.interval = interval
        self.samples: dict[str, list[dict[str, Any]]] = {label: [] for label in handles}
        self.xids: dict[str, list[int]] = {label: [] for label in handles}
        self._by_uuid = {_uuid(backend, h): k for k, h in handles.items()}
        self._events = backend.events(list(handles.values()))
        self.xid_error = self._events.error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        # made before the probes start: their CPU seconds, once waited for, are ours
        self._load = monitors.OthersShare(
            sorted(os.sched_getaffinity(0)), monitors.tree_cpu_seconds
        )
        self.others: float | None = None  # others' share of the probes' CPUs (None: too short)

    def _poll_xids(self) -> None:
        for uuid, code in self._events.poll():
            label = self._by_uuid.get(uuid, next(iter(self.handles)))
            self.xids[label].append(code)

    def _run(self) -> None:
        while not self._stop.is_set():
            for label, handle in self.handles.items():
                self.samples[label].append(self.backend.load_sample(handle))
            self._poll_xids()
            self._stop.wait(self.interval)

    def start(self) -> None:
        if self.handles:
            self._thread.start()

    def stop(self) -> None:
        """After the probes were waited for (their CPU seconds are then this process's)."""
        if self._load.seconds >= MIN_SPAN:
            self.others = self._load.share()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._poll_xids()
        self._events.close()
