"""A fake of ROCm's ``amdsmi`` Python library at the module boundary: a module object with
the functions, enums and exception milarun's AMD SMI backend uses, answering in the return
shapes the library documents (py-interface/README.md, amdsmi_interface.py of ROCm/amdsmi),
over one dict per GPU in the keys of ``data/amdsmi_mi300x.json``. Tests inject it into
``sys.modules["amdsmi"]`` (the backend imports it lazily) or hand it to AmdSmiBackend.

A reading a GPU dict lacks raises AmdSmiLibraryException (AMDSMI_STATUS_NOT_SUPPORTED), as
the library does. ``watts``: a function of wall time giving the socket power (W); the energy
counter is then its integral since the fake was made, in ticks of counter_resolution uJ.
``ppt``: a function of wall time, whether the power limit (PPT) is being enforced.
"""

from __future__ import annotations

import copy
import json
import time
import types
from enum import IntEnum
from pathlib import Path
from typing import Any

# tests/data, named here rather than through conftest: a subprocess of a test imports this
# module as its ``amdsmi`` (tests/machine/test_amd_jobs.py), and conftest imports pytest
DATA = Path(__file__).resolve().parent / "data"
MI300X: dict[str, Any] = json.loads((DATA / "amdsmi_mi300x.json").read_text())
NOT_SUPPORTED = 2  # AMDSMI_STATUS_NOT_SUPPORTED


class AmdSmiException(Exception):
    """amdsmi_exception.AmdSmiException."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = err_code

    def __str__(self) -> str:
        return (
            f"Error code:\n\t{self.err_code} | AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported"
        )


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0x0
    DF = 1
    SOC = 3
    MEM = 4


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    CRITICAL = 5


class AmdSmiGpuBlock(IntEnum):
    UMC = 1
    SDMA = 2
    GFX = 4


class Handle:
    """amdsmi_wrapper.amdsmi_processor_handle."""

    def __init__(self, index: int) -> None:
        self.index = index


def mi300x(i: int = 0, **changes: Any) -> dict[str, Any]:
    """The MI300X's answers, GPU ``i`` (its own UUID and bus), with ``changes``."""
    g = copy.deepcopy(MI300X)
    g["uuid"] = g["uuid"][:-2] + f"{i:02x}"
    g["bdf"] = f"0000:{0x0C + 0x10 * i:02x}:00.0"
    return {**g, **changes}


def fake_amdsmi(gpus: list[dict[str, Any]], init_error: str | None = None) -> types.ModuleType:
    """A module standing for ``amdsmi`` over these GPUs; ``init_error``: amdsmi_init fails."""
    lib = types.ModuleType("amdsmi")
    t0 = time.time()
    lib.AmdSmiException = AmdSmiException  # type: ignore[attr-defined]
    lib.AmdSmiLibraryException = AmdSmiLibraryException  # type: ignore[attr-defined]
    for enum in (AmdSmiClkType, AmdSmiTemperatureType, AmdSmiTemperatureMetric, AmdSmiGpuBlock):
        setattr(lib, enum.__name__, enum)
    lib.calls = []  # type: ignore[attr-defined]  # (function, GPU index) of each reading

    def gpu(handle: Handle, key: str, name: str) -> Any:
        assert isinstance(handle, Handle), f"{name}: not a processor handle"
        lib.calls.append((name, handle.index))  # type: ignore[attr-defined]
        g = gpus[handle.index]
        if key not in g:
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        return copy.deepcopy(g[key])

    def amdsmi_init(flag: Any = None) -> None:
        if init_error:
            raise AmdSmiLibraryException(int(init_error.split()[0]))

    def amdsmi_get_power_info(h: Handle) -> dict[str, Any]:
        found = gpu(h, "power_info", "power_info")
        if "watts" in gpus[h.index]:
            found["current_socket_power"] = round(gpus[h.index]["watts"](time.time()))
        return found

    def amdsmi_get_energy_count(h: Handle) -> dict[str, Any]:
        found = gpu(h, "energy_count", "energy_count")
        if "watts" in gpus[h.index]:
            now = time.time()
            joules = gpus[h.index]["watts"](now) * (now - t0)
            found["energy_accumulator"] = found["power"] = int(
                joules * 1e6 / found["counter_resolution"]
            )
        return found

    def amdsmi_get_violation_status(h: Handle) -> dict[str, Any]:
        found = gpu(h, "violation_status", "violation_status")
        if "ppt" in gpus[h.index]:
            found["active_ppt_pwr"] = bool(gpus[h.index]["ppt"](time.time()))
        return found

    def amdsmi_get_clock_info(h: Handle, clock_type: AmdSmiClkType) -> dict[str, Any]:
        assert isinstance(clock_type, AmdSmiClkType) and clock_type == AmdSmiClkType.GFX
        return gpu(h, "clock_info_gfx", "clock_info")

    def amdsmi_get_temp_metric(
        h: Handle, sensor: AmdSmiTemperatureType, metric: AmdSmiTemperatureMetric
    ) -> int:
        assert isinstance(sensor, AmdSmiTemperatureType)
        assert isinstance(metric, AmdSmiTemperatureMetric)
        by_metric = gpu(h, f"temp_{sensor.name.lower()}", "temp_metric")
        if metric.name not in by_metric:
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        return by_metric[metric.name]

    def amdsmi_get_gpu_ecc_count(h: Handle, block: AmdSmiGpuBlock) -> dict[str, Any]:
        assert isinstance(block, AmdSmiGpuBlock)
        return gpu(h, f"ecc_count_{block.name.lower()}", "ecc_count")

    lib.amdsmi_init = amdsmi_init  # type: ignore[attr-defined]
    lib.amdsmi_shut_down = lambda: None  # type: ignore[attr-defined]
    lib.amdsmi_get_processor_handles = lambda: [Handle(i) for i in range(len(gpus))]  # type: ignore[attr-defined]
    simple = {
        "amdsmi_get_gpu_device_uuid": "uuid",
        "amdsmi_get_gpu_device_bdf": "bdf",
        "amdsmi_get_gpu_asic_info": "asic_info",
        "amdsmi_get_gpu_driver_info": "driver_info",
        "amdsmi_get_gpu_vbios_info": "vbios_info",
        "amdsmi_get_gpu_vram_info": "vram_info",
        "amdsmi_get_gpu_vram_usage": "vram_usage",
        "amdsmi_get_gpu_activity": "activity",
        "amdsmi_get_power_cap_info": "power_cap_info",
        "amdsmi_get_gpu_ecc_enabled": "ecc_enabled",
        "amdsmi_get_pcie_info": "pcie_info",
        "amdsmi_get_gpu_metrics_info": "gpu_metrics",
    }
    for name, key in simple.items():
        setattr(lib, name, lambda h, key=key, name=name: gpu(h, key, name))
    for function in (
        amdsmi_get_power_info,
        amdsmi_get_energy_count,
        amdsmi_get_violation_status,
        amdsmi_get_clock_info,
        amdsmi_get_temp_metric,
        amdsmi_get_gpu_ecc_count,
    ):
        setattr(lib, function.__name__, function)
    return lib
