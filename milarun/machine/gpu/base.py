"""The device interface: what milarun asks of a machine's GPUs, whatever their vendor.

A backend answers for one vendor's management library (milarun.machine.gpu.nvml for
NVIDIA's NVML, .amd for AMD SMI); :class:`Backend` itself is the plain backend, for a
machine where no library answers: it sees no GPU, measures nothing and says why
(``reason``). Every reading is None where the GPU, the driver or the backend does not give
it: a figure no backend measured is "not measured", never 0. Consumers (sysinfo, the
monitors, the energy, the doctor) ask only this interface; vendor libraries are imported by
their backend alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

# The clock-event (throttle) bits of a monitor sample's ``clock_events``, and of the doctor's
# load samples: NVML's, the ones result files have always held; other backends map theirs
# onto them (milarun.measure.energy and milarun.results.throttle name them).
POWER_CAP = 0x4  # SwPowerCap: at the power limit
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
POWER_BRAKE = 0x80


# Intel GPUs (torch.xpu) have no backend: why their figures are "not measured".
XPU_UNMEASURED = (
    "no maintained Python binding of xpu-smi or Level Zero sysman is in milarun's "
    "dependencies: their power, energy, clocks and health are not measured"
)


@dataclass(frozen=True)
class GpuInfo:
    """A GPU as its backend lists it: the one inventory the system record, the provenance
    record and the doctor read."""

    index: int
    name: str
    uuid: str
    pci_bus_id: str  # normalised: 00000000:00:06.0
    memory: int  # bytes
    handle: Any = field(compare=False, repr=False)
    pci_device_id: str | None = None  # 0x2330 (datasheet.pci_device_id); None: not read


@dataclass(frozen=True)
class Health:
    """A GPU at rest as the passive doctor judges it; None: not measured."""

    persistence: bool | None = None
    has_mig: bool = False  # the vendor has MIG at all (a missing reading then means "off")
    mig: tuple[bool, bool] | None = None  # current, pending
    ecc_enabled: bool | None = None
    ecc_uncorrected: int | None = None  # since the driver loaded
    retired_pending: bool | None = None
    remapped_rows: tuple[int, int, int, int] | None = None  # corr, uncorr, pending, failed
    clock: int | None = None  # MHz, the compute clock (SM, GFX)
    max_clock: int | None = None
    app_clock: int | None = None
    default_app_clock: int | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    temperature: float | None = None  # C
    slowdown_temperature: float | None = None
    gpu_links: str | None = None  # XGMI/NVLink, as a line of text


@dataclass(frozen=True)
class Tools:
    """The vendor's commands and names that the doctor's fixes give, ``{i}`` standing for a
    GPU's id (the backend's index, or UUID): the operator runs what the machine has."""

    query: str  # everything the driver says of GPU {i}
    performance: str  # its clocks, power and slowdowns
    processes: str  # what runs on it
    reset: str  # reset it (root)
    kernel_log: str  # the driver's errors in the kernel log
    collective: str  # the library torch.distributed's GPU backend uses (NCCL, RCCL)
    p2p: str  # why a GPU pair copies through host memory, and where to look
    link: str = "NVLink"  # the GPU-to-GPU link the collective's ring or tree runs over


PLAIN_TOOLS = Tools(
    query="the vendor's tool (`nvidia-smi -q -i {i}`, `amd-smi metric -g {i}`)",
    performance="the vendor's tool (`nvidia-smi -q -d PERFORMANCE,CLOCK -i {i}`, "
    "`amd-smi metric -g {i} --clock --power --temperature`)",
    processes="the vendor's tool (`nvidia-smi`, `amd-smi process`)",
    reset="the vendor's tool (`sudo nvidia-smi -i {i} -r`, `sudo amd-smi reset -G -g {i}`)",
    kernel_log="`dmesg`",
    collective="NCCL",
    p2p="the vendor's topology (`nvidia-smi topo -m`, `amd-smi topology`) shows how each pair "
    "is linked: a pair without a GPU link or P2P goes through host memory; check IOMMU/ACS "
    "settings (P2P through PCIe needs ACS off)",
)


class Events:
    """Critical error events (XIDs) of some GPUs while the doctor loads them; this one
    gives none and says why (``error``)."""

    def __init__(self, error: str | None = None) -> None:
        self.error = error

    def poll(self) -> list[tuple[Any, int]]:
        """(handle, code) of each event waiting (none)."""
        return []

    def close(self) -> None:
        pass


def read(reading: Callable[[], Any]) -> Any:
    """A reading, or None where this GPU or driver does not offer it (NotSupported and
    friends, a GPU fallen off the bus: the reading is unknown)."""
    try:
        return reading()
    except Exception:
        return None


def text(value: Any) -> str:
    """A library's string (bytes in older bindings) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def bus_id(value: Any) -> str:
    """``0000:3b:00.0`` or ``00000000:3B:00.0`` -> ``00000000:3B:00.0`` (libraries and
    torch write the domain with 4 or 8 digits)."""
    value = text(value).strip()
    try:
        domain, bus, rest = value.split(":")
        device, function = rest.split(".")
        return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{function}"
    except ValueError:
        return value.upper()


def wheel_version(prefix: str | None) -> str | None:
    """The version of the installed distribution whose name starts with ``prefix``."""
    if not prefix:
        return None
    for dist in metadata.distributions():
        if (dist.metadata["Name"] or "").lower().startswith(prefix):
            return str(dist.version)
    return None


class Backend:
    """The plain backend: no library answers here (``reason`` says why), no GPU is seen
    and nothing is measured. Vendor backends override every method."""

    name = "plain"  # what results record as the backend that measured
    label = "no GPU library"  # in messages: "NVML", "AMD SMI"
    vendor: str | None = None  # "nvidia", "amd"
    list_command = "`nvidia-smi -L` or `amd-smi list`"  # lists the GPU ids
    selects_by_uuid = False  # instances get their GPU by UUID (else by index)
    tools = PLAIN_TOOLS  # the vendor's commands, for the doctor's fixes
    # What is known of this vendor's GPUs, so that no consumer tests the vendor: the plain
    # backend says NVIDIA's (a machine with GPUs but no library is most often one whose NVML
    # is missing). How torch and the processes see them:
    torch_build = "cuda"  # torch.version's attribute a build for these GPUs sets
    runtime_name = "CUDA"  # the runtime it names so
    torch_device = "cuda"  # torch's device type of these GPUs
    # the variables that choose the visible GPUs, in the order the runtime reads them, and
    # (variable, alias) pairs where the first, set, makes the runtime ignore the second
    visible_variables: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES",)
    visible_aliases: tuple[tuple[str, str], ...] = ()
    # compute capability from which the GPU runs TF32 and FP8 matrix products; from which
    # torch's fp32 runs as TF32 counted at TF32's peak (None: never counted as TF32)
    tf32_runs_from: tuple[int, int] = (8, 0)
    fp8_runs_from: tuple[int, int] = (8, 9)
    tf32_counted_from: tuple[int, int] | None = (8, 0)
    device_file = r"nvidia\d+"  # its device nodes in /dev (a regular expression)
    # What the doctor says: the versions line ({driver}, {supports}: the newest runtime
    # the driver runs, {built}: torch, {cuda}/{hip}/{cudnn}/{nccl}: torch's), its fixes
    versions_line = (
        "driver {driver} (CUDA {supports}); {built}: CUDA {cuda}, cuDNN {cudnn}, NCCL {nccl}"
    )
    driver_fix = "reinstall the NVIDIA driver"
    build_fix = "torch is a CPU build: install a CUDA build"
    persistence_fix: str | None = "`sudo nvidia-smi -i {i} -pm 1` (or run nvidia-persistenced)"
    partition_fix = "`sudo nvidia-smi -i {i} -mig 0`"  # MIG off
    app_clock_fix = "`sudo nvidia-smi -i {i} -rac` (reset the application clocks)"
    # where the GPUs are seen (device files, torch) but this library is not loaded: the
    # warning of a vendor whose GPUs `jobs` runs by their ids (None: the run fails) and the fix
    unloaded_warning: str | None = None
    library_fix = (
        "install the NVIDIA driver's libnvidia-ml and the nvidia-ml-py matching the "
        "driver (nvidia-smi must list the GPUs)"
    )
    clock_name = "SM"  # the compute clock
    # the wheels torch loads its GPU libraries from (prefixes of their names): the
    # collective library's, whose version the provenance records, and cuDNN's
    library_wheels: dict[str, str] = {"nccl": "nvidia-nccl", "cudnn": "nvidia-cudnn"}
    list_tool = "`nvidia-smi`"  # the command that must list the GPUs
    power_fix = "`sudo nvidia-smi -i {i} -pl {w:.0f}`"  # the power limit set back to {w} W
    unlisted_fix = (
        "make `nvidia-smi` list the GPUs (install the driver's libnvidia-ml, matching the "
        "loaded kernel module, and a matching nvidia-ml-py): `jobs` finds GPUs through NVML"
    )
    unopenable_fix = (
        "a GPU that NVML lists but CUDA cannot open is often in a bad state: read "
        "`nvidia-smi -q`, reset it (`sudo nvidia-smi -r`) or reboot; MIG slices also show up "
        "this way"
    )

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason or "no GPU management library answers here"

    @property
    def usable(self) -> bool:
        return False

    def count(self) -> int:
        return 0

    def gpus(self) -> list[GpuInfo]:
        return []

    def handle(self, device_id: str) -> Any:
        """The handle of a GPU id: an index (the library's, in PCI bus order) or a UUID."""
        raise LookupError(self.reason)

    def uuid(self, handle: Any) -> str:
        raise LookupError(self.reason)

    def pci_bus_id(self, handle: Any) -> str | None:
        return None

    def pci_device_id(self, handle: Any) -> str | None:
        """The GPU's PCI device id (datasheet.pci_device_id: "0x2330"); None: not read."""
        return None

    def device_name(self, handle: Any) -> str:
        raise LookupError(self.reason)

    def memory(self, handle: Any) -> int | None:
        return None

    def driver(self) -> str:
        raise LookupError(self.reason)

    def runtime_version(self) -> tuple[int, int] | None:
        """The newest CUDA the driver runs (NVML); None where the notion does not apply."""
        return None

    def firmware(self, handle: Any) -> str | None:
        return None

    def cpu_affinity(self, handle: Any, words: int) -> list[int] | None:
        """The CPUs close to the GPU; None where the backend cannot tell."""
        return None

    def reader(self, handle: Any, energy: bool) -> Callable[[], dict[str, Any]]:
        """What the monitor samples of one GPU, each reading on its own (None where not
        given): load (0-1), memory ([MiB used, MiB total]), temperature (C), power (W),
        energy (J since the driver loaded; only with ``energy``), sm_clock (MHz, the
        compute clock) and clock_events (the bits above)."""
        return lambda: dict.fromkeys(
            ("load", "memory", "temperature", "power", "energy", "sm_clock", "clock_events")
        )

    def health(self, handle: Any) -> Health:
        return Health()

    def counters(self, handle: Any) -> dict[str, Any]:
        """The error counters of one GPU now (None: not given)."""
        return {
            "ecc_corrected": None,
            "ecc_uncorrected": None,
            "remapped_uncorrectable": None,
            "remap_pending": None,
            "remap_failure": None,
            "retired_pages": {},
        }

    def load_sample(self, handle: Any) -> dict[str, Any]:
        """One reading of a GPU under load (the doctor's); ``processes``: the ids of the
        processes computing on it, None where the backend does not list them."""
        return dict.fromkeys(
            ("sm_clock", "reasons", "temperature", "power_w", "utilization", "pcie_gen")
        ) | {"pcie_width": None, "processes": None}

    def link(self, handle: Any) -> dict[str, Any]:
        """What the PCIe link can do (the GPU and slot's maximum) and the clock's maximum."""
        return {"max_gen": None, "max_width": None, "max_sm_clock": None}

    def events(self, handles: list[Any]) -> Events:
        return Events(f"{self.label} gives no XID events here")

    def collective_version(self) -> str | None:
        """The version of the collective library torch's GPU backend loads (tools.collective):
        NCCL's, from its wheel; None where it is not installed."""
        return wheel_version(self.library_wheels.get("nccl"))

    def reset_command(self, index: int | str) -> str:
        """The command that resets GPU ``index`` (for the doctor's fixes)."""
        return self.tools.reset.format(i=index)
