"""The NVML backend (NVIDIA, through nvidia-ml-py's ``pynvml``): the only module of milarun
that speaks NVML. Every call goes through the module object it is given (pynvml, or a fake
with its names: tests/fakes.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from milarun.machine.gpu import datasheet
from milarun.machine.gpu.base import Backend, Events, GpuInfo, Health, Tools, bus_id, read, text

# pynvml's constants, by their names there (a fake NVML need not define them).
NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_FEATURE_ENABLED = 1
CORRECTED, UNCORRECTED = 0, 1  # nvmlMemoryErrorType
VOLATILE = 0  # nvmlEccCounterType
ECC = "nvmlDeviceGetTotalEccErrors"
XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
RETIRED_CAUSES = {"single_bit": 0, "double_bit": 1}
# pynvml >= 12 names it "ClocksEvent", older "Throttle".
REASONS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


def load() -> tuple[NvmlBackend | None, str]:
    """The backend over the initialised pynvml, or (None, why NVML is unusable here)."""
    try:
        import pynvml  # from nvidia-ml-py
    except ImportError as err:
        return None, f"nvidia-ml-py not installed ({err})"
    try:
        pynvml.nvmlInit()
    except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML unavailable: {err}"
    return NvmlBackend(pynvml), ""


def _int(value: Any) -> int | None:
    return int(value) if value is not None else None


class NvmlBackend(Backend):
    name = "nvml"
    label = "NVML"
    vendor = "nvidia"
    list_command = "`nvidia-smi -L`"
    selects_by_uuid = True
    tools = Tools(
        query="`nvidia-smi -q -i {i}`",
        performance="`nvidia-smi -q -d PERFORMANCE,CLOCK -i {i}`",
        processes="`nvidia-smi`",
        reset="`sudo nvidia-smi -i {i} -r`",
        kernel_log="`dmesg | grep -i xid`",
        collective="NCCL",
        p2p="`nvidia-smi topo -m` shows how each pair is linked: a pair without NVLink or P2P "
        "goes through host memory; check the NVLink state (`nvidia-smi nvlink -s`), IOMMU/ACS "
        "settings (P2P through PCIe needs ACS off) and the fabric manager on NVSwitch systems",
    )

    def __init__(self, nvml: Any) -> None:
        super().__init__()
        self.nvml = nvml

    @property
    def usable(self) -> bool:
        return True

    def _get(self, name: str, *args: Any) -> Any:
        """``nvml.<name>(*args)``, None where the GPU, driver or library does not give it."""
        return read(lambda: getattr(self.nvml, name)(*args))

    # -- inventory ---------------------------------------------------------------------------
    def count(self) -> int:
        return int(self.nvml.nvmlDeviceGetCount())

    def gpus(self) -> list[GpuInfo]:
        """Every GPU NVML sees (all of them: NVML ignores CUDA_VISIBLE_DEVICES); NVML's
        errors are the caller's to say."""
        nvml, gpus = self.nvml, []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            pci = nvml.nvmlDeviceGetPciInfo(h)
            gpus.append(
                GpuInfo(
                    i,
                    text(nvml.nvmlDeviceGetName(h)),
                    text(nvml.nvmlDeviceGetUUID(h)),
                    bus_id(pci.busId),
                    int(nvml.nvmlDeviceGetMemoryInfo(h).total),
                    h,
                    self._pci_device_id(pci),
                )
            )
        return gpus

    def handle(self, device_id: str) -> Any:
        if device_id.startswith("GPU-"):
            return self.nvml.nvmlDeviceGetHandleByUUID(device_id)
        return self.nvml.nvmlDeviceGetHandleByIndex(int(device_id))

    def uuid(self, handle: Any) -> str:
        return text(self.nvml.nvmlDeviceGetUUID(handle))

    def pci_bus_id(self, handle: Any) -> str | None:
        return text(self.nvml.nvmlDeviceGetPciInfo(handle).busId)

    def pci_device_id(self, handle: Any) -> str | None:
        return self._pci_device_id(self._get("nvmlDeviceGetPciInfo", handle))

    @staticmethod
    def _pci_device_id(pci: Any) -> str | None:
        """pciDeviceId holds the device id in its high 16 bits, the vendor's in its low."""
        return datasheet.pci_device_id(getattr(pci, "pciDeviceId", None))

    def device_name(self, handle: Any) -> str:
        return text(self.nvml.nvmlDeviceGetName(handle))

    def memory(self, handle: Any) -> int | None:
        info = self._get("nvmlDeviceGetMemoryInfo", handle)
        return int(info.total) if info is not None else None

    def driver(self) -> str:
        return text(self.nvml.nvmlSystemGetDriverVersion())

    def runtime_version(self) -> tuple[int, int] | None:
        value = int(self.nvml.nvmlSystemGetCudaDriverVersion())  # 13000 -> (13, 0)
        return value // 1000, value % 1000 // 10

    def firmware(self, handle: Any) -> str | None:
        return text(self.nvml.nvmlDeviceGetVbiosVersion(handle))

    def cpu_affinity(self, handle: Any, words: int) -> list[int] | None:
        mask = self.nvml.nvmlDeviceGetCpuAffinity(handle, words)
        return [w * 64 + b for w, word in enumerate(mask) for b in range(64) if int(word) >> b & 1]

    # -- the monitor ------------------------------------------------------------------------
    def reader(self, handle: Any, energy: bool) -> Callable[[], dict[str, Any]]:
        nvml, h = self.nvml, handle
        # Looked up once, not per sample.
        reasons = next((getattr(nvml, n) for n in REASONS if hasattr(nvml, n)), None)
        sm_clock = getattr(nvml, "NVML_CLOCK_SM", NVML_CLOCK_SM)
        counter = getattr(nvml, "nvmlDeviceGetTotalEnergyConsumption", None) if energy else None

        def sample() -> dict[str, Any]:
            """One GPU's readings, each on its own: many GPUs do not support some."""
            return {
                "load": read(lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu / 100.0),
                "memory": read(lambda: _memory_mib(nvml.nvmlDeviceGetMemoryInfo(h))),
                "temperature": read(lambda: nvml.nvmlDeviceGetTemperature(h, 0)),
                "power": read(lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),  # W
                # J since the driver loaded (NVML counts mJ): energy over a window
                "energy": read(lambda: counter(h) / 1000.0) if counter else None,
                "sm_clock": read(lambda: nvml.nvmlDeviceGetClockInfo(h, sm_clock)),  # MHz
                # bitmask of why clocks are below max (power cap, thermal, ...)
                "clock_events": read(lambda: int(reasons(h))) if reasons else None,
            }

        return sample

    # -- the doctor --------------------------------------------------------------------------
    def health(self, handle: Any) -> Health:
        g, h = self._get, handle
        mig = g("nvmlDeviceGetMigMode", h)
        ecc_mode = g("nvmlDeviceGetEccMode", h)
        retired = g("nvmlDeviceGetRetiredPagesPendingStatus", h)
        rows = g("nvmlDeviceGetRemappedRows", h)  # corrected, uncorrected, pending, failure
        persistence = g("nvmlDeviceGetPersistenceMode", h)
        limit = g("nvmlDeviceGetEnforcedPowerLimit", h)  # mW
        default = g("nvmlDeviceGetPowerManagementDefaultLimit", h)
        return Health(
            persistence=None if persistence is None else persistence == NVML_FEATURE_ENABLED,
            has_mig=True,
            mig=None
            if mig is None
            else (mig[0] == NVML_FEATURE_ENABLED, mig[1] == NVML_FEATURE_ENABLED),
            ecc_enabled=bool(ecc_mode) and ecc_mode[0] == NVML_FEATURE_ENABLED,
            ecc_uncorrected=g(ECC, h, UNCORRECTED, VOLATILE),
            retired_pending=None if retired is None else retired == NVML_FEATURE_ENABLED,
            remapped_rows=None if rows is None else tuple(rows),
            clock=g("nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM),
            max_clock=g("nvmlDeviceGetMaxClockInfo", h, NVML_CLOCK_SM),
            app_clock=g("nvmlDeviceGetApplicationsClock", h, NVML_CLOCK_SM),
            default_app_clock=g("nvmlDeviceGetDefaultApplicationsClock", h, NVML_CLOCK_SM),
            power_limit_w=None if limit is None else limit / 1000,
            default_power_limit_w=default / 1000 if default else None,
            pcie_gen=g("nvmlDeviceGetCurrPcieLinkGeneration", h),
            pcie_width=g("nvmlDeviceGetCurrPcieLinkWidth", h),
            pcie_max_gen=g("nvmlDeviceGetMaxPcieLinkGeneration", h),
            pcie_max_width=g("nvmlDeviceGetMaxPcieLinkWidth", h),
            temperature=g("nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU),
            slowdown_temperature=g(
                "nvmlDeviceGetTemperatureThreshold", h, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
            ),
        )

    def counters(self, handle: Any) -> dict[str, Any]:
        g = self._get
        rows = g("nvmlDeviceGetRemappedRows", handle)
        retired = {}
        for name, cause in RETIRED_CAUSES.items():
            pages = g("nvmlDeviceGetRetiredPages", handle, cause)
            retired[name] = len(pages) if pages is not None else None
        return {
            "ecc_corrected": _int(g(ECC, handle, CORRECTED, VOLATILE)),
            "ecc_uncorrected": _int(g(ECC, handle, UNCORRECTED, VOLATILE)),
            "remapped_uncorrectable": int(rows[1]) if rows is not None else None,
            "remap_pending": bool(rows[2]) if rows is not None else None,
            "remap_failure": bool(rows[3]) if rows is not None else None,
            "retired_pages": retired,
        }

    def _reasons(self, handle: Any) -> int | None:
        for name in REASONS:
            if hasattr(self.nvml, name):
                return _int(self._get(name, handle))
        return None

    def load_sample(self, handle: Any) -> dict[str, Any]:
        g = self._get
        util = g("nvmlDeviceGetUtilizationRates", handle)
        power = g("nvmlDeviceGetPowerUsage", handle)
        running = g("nvmlDeviceGetComputeRunningProcesses", handle)
        return {
            "sm_clock": _int(g("nvmlDeviceGetClockInfo", handle, NVML_CLOCK_SM)),
            "reasons": self._reasons(handle),
            "temperature": _int(g("nvmlDeviceGetTemperature", handle, 0)),
            "power_w": power / 1000 if power is not None else None,
            "utilization": int(util.gpu) if util is not None else None,
            "pcie_gen": _int(g("nvmlDeviceGetCurrPcieLinkGeneration", handle)),
            "pcie_width": _int(g("nvmlDeviceGetCurrPcieLinkWidth", handle)),
            "processes": [int(p.pid) for p in running] if running is not None else None,
        }

    def link(self, handle: Any) -> dict[str, Any]:
        g = self._get
        return {
            "max_gen": _int(g("nvmlDeviceGetMaxPcieLinkGeneration", handle)),
            "max_width": _int(g("nvmlDeviceGetMaxPcieLinkWidth", handle)),
            "max_sm_clock": _int(g("nvmlDeviceGetMaxClockInfo", handle, NVML_CLOCK_SM)),
        }

    def events(self, handles: list[Any]) -> Events:
        try:
            events = self.nvml.nvmlEventSetCreate()
            for handle in handles:
                self.nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL, events)
        except Exception as err:
            return Events(f"NVML gives no XID events here ({err})")
        return _NvmlEvents(self, events)


class _NvmlEvents(Events):
    def __init__(self, backend: NvmlBackend, events: Any) -> None:
        super().__init__()
        self.backend, self.events = backend, events

    def poll(self) -> list[tuple[Any, int]]:
        found: list[tuple[Any, int]] = []
        while True:
            try:
                event = self.backend.nvml.nvmlEventSetWait_v2(self.events, 0)
            except Exception:  # NVML's timeout: no event waiting
                return found
            found.append((self._uuid(event.device), int(event.eventData)))

    def _uuid(self, handle: Any) -> str | None:
        return read(lambda: self.backend.uuid(handle))

    def close(self) -> None:
        self.backend._get("nvmlEventSetFree", self.events)


def _memory_mib(mem: Any) -> list[float]:
    return [mem.used / 2**20, mem.total / 2**20]  # MiB used, total
