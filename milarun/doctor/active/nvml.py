"""What NVML tells about a GPU around and during `doctor --active`'s load (no torch here).

- :func:`counters`: ECC errors (volatile, corrected and uncorrected), remapped rows and
  retired pages, read before and after the load; each is None where the GPU or the driver
  does not give it.
- :class:`Sampler`: a thread reading, every ``interval`` seconds while the probes run, the
  SM clock, the clock event (throttle) reasons, temperature, power, utilisation and the PCIe
  link each GPU trained at; and the XID errors NVML reports as events.
Everything goes through the NVML object given (pynvml, or a fake with its names).
"""

from __future__ import annotations

import threading
from typing import Any

NVML_CLOCK_SM = 1
CORRECTED, UNCORRECTED = 0, 1
VOLATILE = 0
ECC = "nvmlDeviceGetTotalEccErrors"
XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
RETIRED_CAUSES = {"single_bit": 0, "double_bit": 1}

# Clock event (throttle) reasons, NVML's bits, and what each means for a benchmark.
REASONS = {
    0x1: "idle",
    0x2: "application clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}
BAD_REASONS = 0x8 | 0x40 | 0x80  # the hardware protecting itself: FAIL
WARN_REASONS = 0x20  # running hot


def _get(nvml: Any, name: str, *args: Any) -> Any:
    """``nvml.<name>(*args)``, None where the GPU, driver or library does not give it."""
    try:
        return getattr(nvml, name)(*args)
    except Exception:  # NotSupported, a GPU fallen off the bus: the reading is unknown
        return None


def _int(value: Any) -> int | None:
    return int(value) if value is not None else None


def counters(nvml: Any, handle: Any) -> dict[str, Any]:
    """The error counters of one GPU now (None: not given)."""
    rows = _get(nvml, "nvmlDeviceGetRemappedRows", handle)
    retired = {}
    for name, cause in RETIRED_CAUSES.items():
        pages = _get(nvml, "nvmlDeviceGetRetiredPages", handle, cause)
        retired[name] = len(pages) if pages is not None else None
    return {
        "ecc_corrected": _int(_get(nvml, ECC, handle, CORRECTED, VOLATILE)),
        "ecc_uncorrected": _int(_get(nvml, ECC, handle, UNCORRECTED, VOLATILE)),
        "remapped_uncorrectable": int(rows[1]) if rows is not None else None,
        "remap_pending": bool(rows[2]) if rows is not None else None,
        "remap_failure": bool(rows[3]) if rows is not None else None,
        "retired_pages": retired,
    }


def _reasons(nvml: Any, handle: Any) -> int | None:
    for name in (
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ):
        if hasattr(nvml, name):
            return _int(_get(nvml, name, handle))
    return None


def sample(nvml: Any, handle: Any) -> dict[str, Any]:
    """One reading of a GPU under load."""
    util = _get(nvml, "nvmlDeviceGetUtilizationRates", handle)
    power = _get(nvml, "nvmlDeviceGetPowerUsage", handle)
    return {
        "sm_clock": _int(_get(nvml, "nvmlDeviceGetClockInfo", handle, NVML_CLOCK_SM)),
        "reasons": _reasons(nvml, handle),
        "temperature": _int(_get(nvml, "nvmlDeviceGetTemperature", handle, 0)),
        "power_w": power / 1000 if power is not None else None,
        "utilization": int(util.gpu) if util is not None else None,
        "pcie_gen": _int(_get(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle)),
        "pcie_width": _int(_get(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle)),
    }


def total_memory(nvml: Any, handle: Any) -> int | None:
    info = _get(nvml, "nvmlDeviceGetMemoryInfo", handle)
    return int(info.total) if info is not None else None


def link(nvml: Any, handle: Any) -> dict[str, Any]:
    """What the PCIe link can do (the GPU and slot's maximum) and the SM clock's maximum."""
    return {
        "max_gen": _int(_get(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle)),
        "max_width": _int(_get(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle)),
        "max_sm_clock": _int(_get(nvml, "nvmlDeviceGetMaxClockInfo", handle, NVML_CLOCK_SM)),
    }


class Sampler:
    """Samples every GPU in ``handles`` (label -> NVML handle) on a thread until stopped."""

    def __init__(self, nvml: Any, handles: dict[str, Any], interval: float = 0.25) -> None:
        self.nvml = nvml
        self.handles = handles
        self.interval = interval
        self.samples: dict[str, list[dict[str, Any]]] = {label: [] for label in handles}
        self.xids: dict[str, list[int]] = {label: [] for label in handles}
        self.xid_error: str | None = None
        self._by_uuid = {_get(nvml, "nvmlDeviceGetUUID", h): k for k, h in handles.items()}
        self._events = self._register()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _register(self) -> Any:
        try:
            events = self.nvml.nvmlEventSetCreate()
            for handle in self.handles.values():
                self.nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL, events)
            return events
        except Exception as err:
            self.xid_error = f"NVML gives no XID events here ({err})"
            return None

    def _poll_xids(self) -> None:
        while self._events is not None:
            try:
                event = self.nvml.nvmlEventSetWait_v2(self._events, 0)
            except Exception:  # NVML's timeout: no event waiting
                return
            uuid = _get(self.nvml, "nvmlDeviceGetUUID", event.device)
            label = self._by_uuid.get(uuid, next(iter(self.handles)))
            self.xids[label].append(int(event.eventData))

    def _run(self) -> None:
        while not self._stop.is_set():
            for label, handle in self.handles.items():
                self.samples[label].append(sample(self.nvml, handle))
            self._poll_xids()
            self._stop.wait(self.interval)

    def start(self) -> None:
        if self.handles:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._poll_xids()
        if self._events is not None:
            _get(self.nvml, "nvmlEventSetFree", self._events)
