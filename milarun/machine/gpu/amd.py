"""The AMD SMI backend (AMD Instinct, through ROCm's ``amdsmi`` Python library): the only
module of milarun that speaks AMD SMI. ``amdsmi`` is imported lazily (ROCm installs it;
milarun does not depend on it) and every call goes through the module object given (the
library, or a fake with its names: tests/fakes_amdsmi.py).

The readings follow the library's documented return shapes (py-interface/README.md of
ROCm/amdsmi): dicts whose unsupported fields hold the string "N/A" (read here as not
measured, never 0); powers in W, power caps in uW, clocks in MHz, temperatures in C, VRAM
in MiB, the energy counter in ticks of ``counter_resolution`` uJ, PCIe speeds in MT/s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from milarun.machine.gpu import datasheet
from milarun.machine.gpu import rocm as rocm_install
from milarun.machine.gpu.base import (
    HW_SLOWDOWN,
    HW_THERMAL,
    POWER_CAP,
    SW_THERMAL,
    Backend,
    Events,
    GpuInfo,
    Health,
    Tools,
    bus_id,
    read,
    text,
)

# amdsmi_get_violation_status's "active" flags, as the clock-event bits results hold:
# PPT (package power tracking) is the power limit, the socket's thermal limit the
# firmware's slowdown, PROCHOT and HBM temperature the hardware protecting itself, the
# voltage regulators' temperature a hardware slowdown.
VIOLATIONS = {
    "active_ppt_pwr": POWER_CAP,
    "active_socket_thrm": SW_THERMAL,
    "active_prochot_thrm": HW_THERMAL,
    "active_hbm_thrm": HW_THERMAL,
    "active_vr_thrm": HW_SLOWDOWN,
}
PCIE_GEN = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}  # MT/s per lane
PCI_DEVICES = Path("/sys/bus/pci/devices")


def load() -> tuple[AmdSmiBackend | None, str]:
    """The backend over the initialised amdsmi, or (None, why it is unusable here)."""
    try:
        import amdsmi  # type: ignore[import-not-found]  # ROCm's, not milarun's dependency
    except ImportError as err:
        return None, f"amdsmi not installed ({err})"
    try:
        amdsmi.amdsmi_init()
    except Exception as err:  # AmdSmiLibraryException: driver not loaded, ...
        return None, f"AMD SMI unavailable: {err}"
    return AmdSmiBackend(amdsmi), ""


def number(value: Any) -> float | None:
    """A documented numeric field, or None for "N/A" (and anything that is no number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _int(value: Any) -> int | None:
    found = number(value)
    return int(found) if found is not None else None


def pcie_gen(speed: Any) -> int | None:
    """A lane's speed (MT/s; some versions say GT/s) as its PCIe generation."""
    found = number(speed)
    if found is None:
        return None
    return PCIE_GEN.get(int(found * 1000 if found < 100 else found))


def cpu_list(spec: str) -> list[int]:
    """``0-3,8`` -> [0, 1, 2, 3, 8] (the kernel's cpulist format)."""
    cpus: list[int] = []
    for part in spec.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


class AmdSmiBackend(Backend):
    name = "amdsmi"
    label = "AMD SMI"
    vendor = "amd"
    list_command = "`amd-smi list`"
    # ROCm's torch: a HIP build, its GPUs torch's "cuda" devices, CUDA_VISIBLE_DEVICES
    # HIP's alias (read where HIP_VISIBLE_DEVICES is unset), after ROCR's own variable
    torch_build, runtime_name = "hip", "HIP"
    visible_variables = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
    visible_aliases = (("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),)
    tf32_runs_from = fp8_runs_from = (0, 0)  # every GPU ROCm's torch runs
    tf32_counted_from = None  # ROCm's fp32 is not counted at a TF32 peak
    device_file = r"kfd"
    versions_line = "amdgpu driver {driver}; {built}: HIP {hip}, RCCL {nccl}"
    driver_fix = "reinstall the amdgpu driver (ROCm)"
    build_fix = "torch is not a ROCm build: install a ROCm build"
    persistence_fix = None  # the driver keeps its GPUs' state: no persistence mode
    partition_fix = "`sudo amd-smi set -g {i} -C SPX`"  # one compute partition
    app_clock_fix = "`sudo amd-smi reset -g {i} -c` (reset the clocks)"
    unloaded_warning = (
        "AMD GPUs ({seen}): no AMD SMI here ({reason}), so no GPU inventory, energy or health"
    )
    library_fix = (
        "install ROCm's amdsmi Python library (`amd-smi list` must list the GPUs), or "
        "give `jobs` the GPUs' ids: --devices 0,1,..."
    )
    library_wheels: dict[str, str] = {}  # RCCL comes with ROCm's torch, or the ROCm install
    clock_name = "GFX"
    list_tool = "`amd-smi list`"
    power_fix = "`sudo amd-smi set -g {i} -o {w:.0f}`"
    unlisted_fix = (
        "make `amd-smi list` list the GPUs (the amdgpu driver loaded, ROCm's amdsmi matching "
        "it): `jobs` finds GPUs through it"
    )
    unopenable_fix = (
        "a GPU that AMD SMI lists but HIP cannot open is often in a bad state: read "
        "`amd-smi metric`, reset it (`sudo amd-smi reset -G`) or reboot; compute partitions "
        "(CPX) also show up this way"
    )
    # amd-smi's (`rocm-smi` on older ROCm): metric, process, reset, topology, xgmi
    tools = Tools(
        query="`amd-smi metric -g {i}`",
        performance="`amd-smi metric -g {i} --clock --power --temperature`",
        processes="`amd-smi process`",
        reset="`sudo amd-smi reset -G -g {i}`",
        kernel_log="`dmesg | grep -i amdgpu`",
        collective="RCCL",
        link="XGMI",
        p2p="`amd-smi topology` shows how each pair is linked: a pair without XGMI or P2P goes "
        "through host memory; check the XGMI links (`amd-smi xgmi`) and IOMMU/ACS settings "
        "(P2P through PCIe needs ACS off; `iommu=pt` on the kernel command line)",
    )

    def __init__(self, lib: Any) -> None:
        super().__init__()
        self.lib = lib
        self._handles: list[Any] | None = None

    @property
    def usable(self) -> bool:
        return True

    def _get(self, name: str, *args: Any) -> Any:
        return read(lambda: getattr(self.lib, name)(*args))

    def _field(self, name: str, handle: Any, key: str, *args: Any) -> float | None:
        found = self._get(name, handle, *args)
        return number(found.get(key)) if isinstance(found, dict) else None

    def handles(self) -> list[Any]:
        if self._handles is None:
            self._handles = list(self.lib.amdsmi_get_processor_handles())
        return self._handles

    # -- inventory ---------------------------------------------------------------------------
    def count(self) -> int:
        return len(self.handles())

    def gpus(self) -> list[GpuInfo]:
        lib, gpus = self.lib, []
        for i, h in enumerate(self.handles()):
            mib = lib.amdsmi_get_gpu_vram_info(h)["vram_size"]
            gpus.append(
                GpuInfo(
                    i,
                    self.device_name(h),
                    self.uuid(h),
                    bus_id(lib.amdsmi_get_gpu_device_bdf(h)),
                    int(mib) * 2**20,
                    h,
                    self.pci_device_id(h),
                )
            )
        return gpus

    def handle(self, device_id: str) -> Any:
        handles = self.handles()
        if device_id.isdigit():
            if int(device_id) >= len(handles):
                raise LookupError(f"AMD SMI sees no GPU {device_id}")
            return handles[int(device_id)]
        wanted = device_id.removeprefix("GPU-").lower()
        for h in handles:
            if self.uuid(h).removeprefix("GPU-").lower() == wanted:
                return h
        raise LookupError(f"AMD SMI sees no GPU with UUID {device_id}")

    def uuid(self, handle: Any) -> str:
        return text(self.lib.amdsmi_get_gpu_device_uuid(handle))

    def pci_bus_id(self, handle: Any) -> str | None:
        return text(self.lib.amdsmi_get_gpu_device_bdf(handle))

    def device_name(self, handle: Any) -> str:
        return text(self.lib.amdsmi_get_gpu_asic_info(handle)["market_name"])

    def pci_device_id(self, handle: Any) -> str | None:
        asic = self._get("amdsmi_get_gpu_asic_info", handle)
        return datasheet.pci_device_id(asic.get("device_id") if isinstance(asic, dict) else None)

    def memory(self, handle: Any) -> int | None:
        mib = self._field("amdsmi_get_gpu_vram_info", handle, "vram_size")
        return int(mib) * 2**20 if mib is not None else None

    def driver(self) -> str:
        handles = self.handles()
        if not handles:
            raise LookupError("AMD SMI sees no GPU")
        return text(self.lib.amdsmi_get_gpu_driver_info(handles[0])["driver_version"])

    def firmware(self, handle: Any) -> str | None:
        found = self.lib.amdsmi_get_gpu_vbios_info(handle)
        version = found.get("version") or found.get("vbios_version_string")
        return text(version) if version else None

    def cpu_affinity(self, handle: Any, words: int) -> list[int] | None:
        # The kernel's own list for the GPU's PCI device (amdsmi's affinity call is newer
        # than the versions a machine may have).
        bdf = bus_id(self.lib.amdsmi_get_gpu_device_bdf(handle))
        domain, rest = bdf.split(":", 1)
        where = PCI_DEVICES / f"{int(domain, 16):04x}:{rest.lower()}" / "local_cpulist"
        try:
            cpus = cpu_list(where.read_text())
        except (OSError, ValueError):
            return None
        limit = os.cpu_count() or 1
        return [c for c in cpus if c < max(limit, words * 64)]

    # -- readings ----------------------------------------------------------------------------
    def _power(self, handle: Any) -> float | None:
        found = self._get("amdsmi_get_power_info", handle)
        if not isinstance(found, dict):
            return None
        # current_socket_power on MI300 and later, average_socket_power before
        current = number(found.get("current_socket_power"))
        return current if current is not None else number(found.get("average_socket_power"))

    def _energy(self, handle: Any) -> float | None:
        found = self._get("amdsmi_get_energy_count", handle)
        if not isinstance(found, dict):
            return None
        ticks = number(found.get("energy_accumulator"))
        resolution = number(found.get("counter_resolution"))
        return ticks * resolution / 1e6 if ticks is not None and resolution else None

    def _clock(self, handle: Any, key: str = "clk") -> int | None:
        return _int(self._field("amdsmi_get_clock_info", handle, key, self.lib.AmdSmiClkType.GFX))

    def _temperature(self, handle: Any, metric: str = "CURRENT") -> float | None:
        # The hotspot (junction): MI300-class GPUs have no edge sensor.
        return number(
            self._get(
                "amdsmi_get_temp_metric",
                handle,
                self.lib.AmdSmiTemperatureType.HOTSPOT,
                getattr(self.lib.AmdSmiTemperatureMetric, metric),
            )
        )

    def _violations(self, handle: Any) -> int | None:
        found = self._get("amdsmi_get_violation_status", handle)
        if not isinstance(found, dict):
            return None
        flags = {k: found.get(k) for k in VIOLATIONS}
        if not any(isinstance(v, bool) for v in flags.values()):
            return None  # every flag "N/A": not measured
        mask = 0
        for key, active in flags.items():
            if active is True:
                mask |= VIOLATIONS[key]
        return mask

    def _load(self, handle: Any) -> float | None:
        return self._field("amdsmi_get_gpu_activity", handle, "gfx_activity")

    def _pcie(self, handle: Any) -> dict[str, Any]:
        found = self._get("amdsmi_get_pcie_info", handle)
        static = found.get("pcie_static", {}) if isinstance(found, dict) else {}
        metric = found.get("pcie_metric", {}) if isinstance(found, dict) else {}
        return {
            "gen": pcie_gen(metric.get("pcie_speed")),
            "width": _int(metric.get("pcie_width")),
            "max_gen": pcie_gen(static.get("max_pcie_speed"))
            or _int(static.get("pcie_interface_version")),
            "max_width": _int(static.get("max_pcie_width")),
        }

    def reader(self, handle: Any, energy: bool) -> Callable[[], dict[str, Any]]:
        h = self

        def sample() -> dict[str, Any]:
            load = h._load(handle)
            usage = h._get("amdsmi_get_gpu_vram_usage", handle)
            used = number(usage.get("vram_used")) if isinstance(usage, dict) else None
            total = number(usage.get("vram_total")) if isinstance(usage, dict) else None
            return {
                "load": load / 100.0 if load is not None else None,
                "memory": [used, total] if used is not None and total is not None else None,
                "temperature": h._temperature(handle),
                "power": h._power(handle),
                "energy": h._energy(handle) if energy else None,
                "sm_clock": h._clock(handle),
                "clock_events": h._violations(handle),
            }

        return sample

    def health(self, handle: Any) -> Health:
        cap = self._get("amdsmi_get_power_cap_info", handle)
        cap = cap if isinstance(cap, dict) else {}
        limit, default = number(cap.get("power_cap")), number(cap.get("default_power_cap"))
        enabled = self._get("amdsmi_get_gpu_ecc_enabled", handle)
        metrics = self._get("amdsmi_get_gpu_metrics_info", handle)
        metrics = metrics if isinstance(metrics, dict) else {}
        width, speed = (
            number(metrics.get("xgmi_link_width")),
            number(metrics.get("xgmi_link_speed")),
        )
        pcie = self._pcie(handle)
        return Health(
            ecc_enabled=None if enabled is None else bool(enabled),
            ecc_uncorrected=_int(
                self._field(
                    "amdsmi_get_gpu_ecc_count",
                    handle,
                    "uncorrectable_count",
                    self.lib.AmdSmiGpuBlock.UMC,
                )
            ),
            clock=self._clock(handle),
            max_clock=self._clock(handle, "max_clk"),
            power_limit_w=limit / 1e6 if limit else None,  # uW
            default_power_limit_w=default / 1e6 if default else None,
            pcie_gen=pcie["gen"],
            pcie_width=pcie["width"],
            pcie_max_gen=pcie["max_gen"],
            pcie_max_width=pcie["max_width"],
            temperature=self._temperature(handle),
            slowdown_temperature=self._temperature(handle, "CRITICAL"),
            gpu_links=(
                f"XGMI width {width:.0f} at {speed:.0f} GB/s"
                if width is not None and speed is not None
                else None
            ),
        )

    def counters(self, handle: Any) -> dict[str, Any]:
        block = self.lib.AmdSmiGpuBlock.UMC  # the memory controllers: HBM errors
        found = self._get("amdsmi_get_gpu_ecc_count", handle, block)
        found = found if isinstance(found, dict) else {}
        return {
            "ecc_corrected": _int(found.get("correctable_count")),
            "ecc_uncorrected": _int(found.get("uncorrectable_count")),
            "remapped_uncorrectable": None,
            "remap_pending": None,
            "remap_failure": None,
            "retired_pages": {},
        }

    def load_sample(self, handle: Any) -> dict[str, Any]:
        pcie = self._pcie(handle)
        load = self._load(handle)
        return {
            "sm_clock": self._clock(handle),
            "reasons": self._violations(handle),
            "temperature": _int(self._temperature(handle)),
            "power_w": self._power(handle),
            "utilization": int(load) if load is not None else None,
            "pcie_gen": pcie["gen"],
            "pcie_width": pcie["width"],
        }

    def link(self, handle: Any) -> dict[str, Any]:
        pcie = self._pcie(handle)
        return {
            "max_gen": pcie["max_gen"],
            "max_width": pcie["max_width"],
            "max_sm_clock": self._clock(handle, "max_clk"),
        }

    def collective_version(self, rocm: Path | None = None) -> str | None:
        """RCCL's: torch's, else the ROCm install's header (``rocm``: its root)."""
        return rocm_install.rccl_version(rocm)

    def events(self, handles: list[Any]) -> Events:
        return Events("AMD SMI's events are not read here: check `dmesg` for amdgpu errors")
