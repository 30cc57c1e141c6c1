"""Fakes shared by the tests: an NVML over known GPU readings (idle, or under load with its energy
counter moving), NVML failing to load, a clock that moves when told."""

from __future__ import annotations

import json
import time
import types
from types import SimpleNamespace
from typing import Any

from conftest import DATA

# A real H100's NVML and torch readings (keys: nvml_h100.json's, FakeNVML's vocabulary).
H100: dict[str, Any] = json.loads((DATA / "nvml_h100.json").read_text())


class NotSupported(Exception):
    """What pynvml raises (NVMLError_NotSupported) for a reading a GPU does not offer."""


class FakeNVML:
    """The slice of the pynvml API that milarun uses (its monitors, sysinfo, GPU ids and
    doctor), over one dict of readings per GPU, in the keys of ``data/nvml_h100.json``:
    name, uuid, pci_bus_id, memory (total bytes), utilization (gpu %, memory %),
    temperature (C), power_usage_mw, and the doctor's readings (persistence, mig, clocks,
    power limits, PCIe, ECC, cpu_affinity). A GPU dict holds only what its test reads, and
    may add what the H100 file lacks: ``memory_used`` (bytes; 0 if absent),
    ``remapped_rows`` (corrected, uncorrected, pending, failure; none if absent),
    ``default_app_clock_sm`` (the application clock if absent), ``retired_pending`` and
    ``slowdown_temperature``, ``vbios``, ``processes`` (the pids computing on it). Any other
    reading its dict lacks raises NotSupported, as pynvml does for a reading a GPU does not
    offer.

    Handles are ``("handle", index)``. Every handle lookup is recorded in ``asked`` (indices
    or UUIDs), every reading in ``read`` (device indices). ``fail_handles``: every handle
    lookup fails; ``fail_power``: every power reading fails.
    """

    def __init__(
        self,
        gpus: list[dict] | None = None,
        driver: str | bytes = H100["driver"],
        cuda_driver: int = H100["cuda_driver"],
        fail_handles: bool = False,
        fail_power: bool = False,
    ) -> None:
        self.gpus = gpus if gpus is not None else []
        self.driver = driver
        self.cuda_driver = cuda_driver
        self.fail_handles = fail_handles
        self.fail_power = fail_power
        self.asked: list[object] = []  # indices / UUIDs whose handle was requested
        self.read: list[int] = []  # device indices whose readings were taken

    # -- the library and the handles
    def nvmlInit(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int):
        self.asked.append(index)
        if self.fail_handles:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        if not 0 <= index < len(self.gpus):
            raise RuntimeError(f"no GPU with index {index}")
        return ("handle", index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str):
        self.asked.append(uuid)
        if self.fail_handles:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        for i, g in enumerate(self.gpus):
            if g["uuid"] == uuid:
                return ("handle", i)
        raise RuntimeError(f"no GPU with UUID {uuid}")

    def _gpu(self, handle) -> dict:
        assert handle[0] == "handle"
        self.read.append(handle[1])
        return self.gpus[handle[1]]

    def _reading(self, handle, key: str):
        gpu = self._gpu(handle)
        if key not in gpu:
            raise NotSupported("Not Supported")
        return gpu[key]

    # -- identity
    def nvmlDeviceGetName(self, handle):
        return self._reading(handle, "name")

    def nvmlDeviceGetUUID(self, handle):
        return self._reading(handle, "uuid")

    def nvmlDeviceGetVbiosVersion(self, handle):
        return self._reading(handle, "vbios")

    def nvmlDeviceGetPciInfo(self, handle):  # pynvml's busId is bytes (a char array)
        bus = self._gpu(handle).get("pci_bus_id", "00000000:00:00.0")
        # pciDeviceId: the device id in its high 16 bits, the vendor's (0x10de) in its low
        return SimpleNamespace(busId=bus.encode(), pciDeviceId=self._gpu(handle).get("pci_id"))

    # -- what the monitors sample
    def nvmlDeviceGetUtilizationRates(self, handle):
        gpu, memory = self._reading(handle, "utilization")
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetMemoryInfo(self, handle):
        g = self._gpu(handle)
        used = g.get("memory_used", 0)
        return SimpleNamespace(used=used, total=g["memory"], free=g["memory"] - used)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        assert sensor == 0  # NVML_TEMPERATURE_GPU
        return self._reading(handle, "temperature")

    def nvmlDeviceGetPowerUsage(self, handle):
        power = self._reading(handle, "power_usage_mw")
        if self.fail_power:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return power

    # -- what the doctor checks
    def nvmlDeviceGetPersistenceMode(self, handle):
        return self._reading(handle, "persistence")

    def nvmlDeviceGetMigMode(self, handle):
        return self._reading(handle, "mig")

    def nvmlDeviceGetEccMode(self, handle):
        return self._reading(handle, "ecc_mode")

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return self._sm(kind, self._reading(handle, "max_clock_sm"))

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return self._sm(kind, self._reading(handle, "clock_sm"))

    def nvmlDeviceGetApplicationsClock(self, handle, kind):
        return self._sm(kind, self._reading(handle, "app_clock_sm"))

    def nvmlDeviceGetDefaultApplicationsClock(self, handle, kind):
        g = self._gpu(handle)
        return self._sm(kind, g.get("default_app_clock_sm", g["app_clock_sm"]))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._reading(handle, "enforced_power_limit_mw")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle):
        return self._reading(handle, "power_default_limit_mw")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._reading(handle, "pcie_gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._reading(handle, "pcie_width")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._reading(handle, "pcie_max_gen")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._reading(handle, "pcie_max_width")

    def nvmlDeviceGetCpuAffinity(self, handle, words):
        return self._reading(handle, "cpu_affinity")[:words]

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type):
        assert (error_type, counter_type) == (1, 0)  # uncorrected, volatile
        return self._reading(handle, "ecc_uncorrected_volatile")

    def nvmlDeviceGetRemappedRows(self, handle):
        return tuple(self._gpu(handle).get("remapped_rows", (0, 0, 0, 0)))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        return self._reading(handle, "retired_pending")  # Hopper remaps rows instead

    def nvmlDeviceGetComputeRunningProcesses(self, handle):  # ``processes``: their pids
        return [SimpleNamespace(pid=pid) for pid in self._reading(handle, "processes")]

    def nvmlDeviceGetTemperatureThreshold(self, handle, threshold):
        assert threshold == 1  # NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return self._reading(handle, "slowdown_temperature")

    @staticmethod
    def _sm(kind: int, value: int) -> int:
        assert kind == 1  # NVML_CLOCK_SM
        return value


class PoweredNVML(FakeNVML):
    """FakeNVML under load at ``watts`` each, at its power limit (SwPowerCap) with its SM
    clock at ``clock``; the energy counter moves with wall time since the fake was made, as
    a real GPU's does."""

    def __init__(self, gpus: list[dict], watts: float, clock: int = 1980) -> None:
        super().__init__([{**g, "utilization": [100, 0]} for g in gpus])
        self.watts, self.clock, self.t0 = watts, clock, time.time()

    def nvmlDeviceGetPowerUsage(self, handle):  # mW
        return 1000.0 * self.watts

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # mJ
        return 1000.0 * self.watts * (time.time() - self.t0)

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return self.clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0x4  # SwPowerCap


def no_nvml() -> types.ModuleType:
    """``pynvml`` on a machine without NVIDIA's driver: nvmlInit fails (tests put it in
    sys.modules, so that the device interface goes on to the next library)."""
    module = types.ModuleType("pynvml")

    def init() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    module.nvmlInit = init  # type: ignore[attr-defined]
    return module


class FakeClock:
    """A clock that only moves when the test says so (``advance``, or ``now`` set)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float) -> None:
        self.now += dt


def run_on_fake_gpu(monkeypatch: Any, nvml: FakeNVML, interval: float = 0.05) -> None:
    """Make `runner.run_test` in this process see one GPU, cuda:0, read through ``nvml``
    (its monitor sampling every ``interval`` s); the test's model runs on the CPU."""
    from milarun.machine import devices, monitors, torchdevice
    from milarun.machine.gpu.nvml import NvmlBackend

    real = monitors.gpu_monitor
    monkeypatch.setattr(
        monitors,
        "gpu_monitor",
        lambda **_: real(backend=NvmlBackend(nvml), ids=["0"], interval=interval),
    )
    monkeypatch.setattr(devices, "instance_device_label", lambda environ=None: "cuda:0")
    monkeypatch.setattr(torchdevice, "torch_device", lambda: "cpu")  # calibration only spins
