"""The one datasheet: every published GPU figure milarun knows, and the lookups over it.

The only place in milarun where a GPU figure is written (tests/machine/test_datasheet.py
enforces it). Rows are keyed by a datasheet row name ("H100-SXM", "MI300X", ...); a device
name as NVML, AMD SMI or torch spell it finds its row through :func:`row_for`, strict on
purpose (a wrong row gives a confident wrong percentage). No torch import: ``milarun report``
and ``milarun verify`` read these without it.

Public lookups (each None where the device or the figure is unknown):

- ``row_for(name)``: the datasheet row of a device name (``match_device`` is its old name).
- ``peak_tflops(name, precision)`` / ``peak_flops(name, precision)``: the dense peak, in
  TFLOP/s or FLOP/s, of a precision in ``PRECISIONS``; ``percent_of_peak``.
- ``memory_bandwidth(name, memory_bytes=None)``: the memory bandwidth in bytes/s (the A100's
  depends on its memory size: give it to pick the 80 GB figure).
- ``board_power_w(name)``: the board power (TDP/TBP) in W, the most the device may draw.
- ``fp8_format(name)``: the torch dtype name of the architecture's FP8 e4m3 format
  (``float8_e4m3fn`` for NVIDIA and CDNA 4, ``float8_e4m3fnuz`` for CDNA 3), None without FP8.
- ``links(name)``: the GPU-to-GPU link and the host link, each with its GB/s per direction.
- ``pcie_bandwidth(gen, width)``: the bytes/s per direction a PCIe link carries.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")

# Published dense peaks in TFLOP/s (no 2:4 sparsity). fp16/bf16/tf32/fp8 are the
# tensor/matrix core figures; fp32 is the plain (non-tensor) FP32 figure on NVIDIA and the
# FP32 matrix figure on AMD, whose GEMMs run FP32 on the matrix cores. None: not supported
# in hardware. Sheets that give only the sparse figure are halved ("1/2 lower without
# sparsity"); board figures are divided by the GPUs on the board.
PEAKS: dict[str, dict[str, float | None]] = {
    # NVIDIA V100 datasheet (Tesla V100, 2020): SXM2 15.7 FP32, 125 tensor (FP16 in,
    # FP32 accumulate); PCIe 14 / 112; V100S PCIe 16.4 / 130. No TF32, BF16 or FP8 units.
    "V100-SXM2": {"fp32": 15.7, "tf32": None, "fp16": 125.0, "bf16": None, "fp8": None},
    "V100-PCIe": {"fp32": 14.0, "tf32": None, "fp16": 112.0, "bf16": None, "fp8": None},
    "V100S-PCIe": {"fp32": 16.4, "tf32": None, "fp16": 130.0, "bf16": None, "fp8": None},
    # NVIDIA A100 datasheet (1758950-r4): the same for SXM4 and PCIe, 40GB and 80GB:
    # FP32 19.5, TF32 156, BF16 312, FP16 312 (the sparse figures are twice these); no FP8.
    "A100-SXM": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "fp8": None},
    "A100-PCIe": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "fp8": None},
    # NVIDIA H100 datasheet: SXM FP32 67, TF32 989*, BF16/FP16 1979*, FP8 3958*; PCIe FP32
    # 51, TF32 756*, BF16/FP16 1513*, FP8 3026* (* with sparsity: "1/2 lower without").
    "H100-SXM": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5, "fp8": 1979.0},
    "H100-PCIe": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.5, "bf16": 756.5, "fp8": 1513.0},
    # NVIDIA H200 datasheet, H200 SXM: the H100 SXM compute (FP32 67, TF32 989*,
    # BF16/FP16 1979*, FP8 3958*, with sparsity), with more memory.
    "H200-SXM": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5, "fp8": 1979.0},
    # NVIDIA H200 datasheet, H200 NVL column: FP32 60, TF32 835*, BF16/FP16 1,671*, FP8
    # 3,341* (* with sparsity): the PCIe card at its 600 W limit.
    "H200-NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5, "fp8": 1670.5},
    # NVIDIA H20 (Hopper, export SKU) product brief: FP32 44, TF32 74, BF16/FP16 148,
    # FP8 296 (dense).
    "H20": {"fp32": 44.0, "tf32": 74.0, "fp16": 148.0, "bf16": 148.0, "fp8": 296.0},
    # NVIDIA L40S datasheet: FP32 91.6, TF32 183 (366*), BF16/FP16 362.05 (733*), FP8 733
    # (1,466*) (* with sparsity). The sheet's own rounding: 2 x 183 is 1% above 362.05.
    "L40S": {"fp32": 91.6, "tf32": 183.0, "fp16": 362.05, "bf16": 362.05, "fp8": 733.0},
    # NVIDIA GB200 NVL72 / HGX B200 datasheet, "individual Blackwell GPU": HGX B200 FP32 75,
    # TF32 2.2 P*, FP16/BF16 4.5 P*, FP8 9 P*; GB200 FP32 80, TF32 2.5 P*, FP16/BF16 5 P*,
    # FP8 10 P* (* with sparsity). The sheet's own rounding: 2 x 1100 is 2% below 2250.
    "B200": {"fp32": 75.0, "tf32": 1100.0, "fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0},
    "GB200": {"fp32": 80.0, "tf32": 1250.0, "fp16": 2500.0, "bf16": 2500.0, "fp8": 5000.0},
    # NVIDIA HGX B300 datasheet (Blackwell Ultra), for the 8-GPU board: FP32 600 T, TF32
    # 18 P*, FP16/BF16 36 P*, FP8 72 P* (* with sparsity): an eighth, halved, per GPU.
    "B300": {"fp32": 75.0, "tf32": 1125.0, "fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0},
    # AMD Instinct MI250X data sheet: per OAM package FP32 matrix 95.7, FP16/BF16 383;
    # no TF32 or FP8. The package is two GCDs, each its own torch device: half per device.
    "MI250X": {"fp32": 47.85, "tf32": None, "fp16": 191.5, "bf16": 191.5, "fp8": None},
    # AMD Instinct MI300X data sheet: FP32 matrix 163.4, TF32 653.7, FP16/BF16 1307.4,
    # FP8 2614.9 (dense; twice with structured sparsity). One device in SPX mode.
    "MI300X": {"fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4, "fp8": 2614.9},
    # AMD Instinct MI325X data sheet: the MI300X compute (FP32 matrix 163.4, TF32 653.7,
    # FP16/BF16 1307.4, FP8 2614.9 dense) with 256 GB of HBM3E.
    "MI325X": {"fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4, "fp8": 2614.9},
    # AMD Instinct MI355X data sheet (CDNA 4): FP32 matrix 157.3, FP16/BF16 2516.6, FP8
    # 5033.2 (dense); CDNA 4 has no TF32 matrix unit (TF32 is emulated in software).
    "MI355X": {"fp32": 157.3, "tf32": None, "fp16": 2516.6, "bf16": 2516.6, "fp8": 5033.2},
    # Intel Gaudi 3 AI accelerator (Hot Chips 2024, "Intel Gaudi 3 Spec" table; the white
    # paper's): BF16 matrix 1835, FP8 matrix 1835 (dense), BF16 vector 28.7. No FP16, TF32
    # or FP32 matrix figure is published: None (unknown, not "unsupported", here).
    "Gaudi3": {"fp32": None, "tf32": None, "fp16": None, "bf16": 1835.0, "fp8": 1835.0},
}

# Datasheet links in GB/s per direction, per PEAKS row: (the GPU-to-GPU link, its GB/s;
# the host link, its GB/s). Sheets give bidirectional totals: halved here. Sources as the
# rows above; links from the same sheets: H100/H200 SXM NVLink 900 GB/s, PCIe gen5 x16
# 128 GB/s; H200 NVL NVLink bridge 900 GB/s; B200/B300/GB200 NVLink 5 1.8 TB/s (B300: PCIe
# gen6 x16); MI300X/MI325X Infinity Fabric 7 links 896 GB/s peak, MI355X 1075 GB/s, all PCIe
# gen5 x16 128 GB/s; Gaudi 3 24 x 200 GbE RoCE 1200 GB/s, PCIe gen5 x16 128 GB/s.
LINKS: dict[str, tuple[str, float, str, float]] = {
    "H100-SXM": ("NVLink 4", 450.0, "PCIe gen5 x16", 64.0),
    "H200-SXM": ("NVLink 4", 450.0, "PCIe gen5 x16", 64.0),
    "H200-NVL": ("NVLink 4 bridge", 450.0, "PCIe gen5 x16", 64.0),
    "B200": ("NVLink 5", 900.0, "PCIe gen5 x16", 64.0),
    "B300": ("NVLink 5", 900.0, "PCIe gen6 x16", 128.0),
    "GB200": ("NVLink 5", 900.0, "NVLink-C2C", 450.0),
    "MI300X": ("Infinity Fabric (XGMI) x7", 448.0, "PCIe gen5 x16", 64.0),
    "MI325X": ("Infinity Fabric (XGMI) x7", 448.0, "PCIe gen5 x16", 64.0),
    "MI355X": ("Infinity Fabric (XGMI) x7", 537.5, "PCIe gen5 x16", 64.0),
    "Gaudi3": ("24 x 200 GbE RoCE", 600.0, "PCIe gen5 x16", 64.0),
}


# Memory bandwidth in bytes/s per PEAKS row, from the same datasheets as the peaks (HBM or
# GDDR, the sheet's "GPU memory bandwidth"). The A100's depends on its memory: the 80 GB
# cards are in MEMORY_80GB (A100 80GB datasheet: SXM 2,039 GB/s, PCIe 1,935 GB/s). MI250X:
# per GCD, half of the package's 3.2768 TB/s.
TB = 1e12
MEMORY_BYTES_PER_S: dict[str, float] = {
    "V100-SXM2": 0.900 * TB,  # V100 datasheet: 900 GB/s
    "V100-PCIe": 0.900 * TB,
    "V100S-PCIe": 1.134 * TB,  # V100S: 1,134 GB/s
    "A100-SXM": 1.555 * TB,  # A100 40GB: 1,555 GB/s
    "A100-PCIe": 1.555 * TB,
    "H100-SXM": 3.35 * TB,  # H100 datasheet: SXM 3.35 TB/s, PCIe 2 TB/s
    "H100-PCIe": 2.0 * TB,
    "H200-SXM": 4.8 * TB,  # H200 datasheet: 4.8 TB/s, SXM and NVL alike
    "H200-NVL": 4.8 * TB,
    "H20": 4.0 * TB,  # H20 product brief: 4.0 TB/s
    "L40S": 0.864 * TB,  # L40S datasheet: 864 GB/s
    "B200": 8.0 * TB,  # HGX B200 / GB200 NVL72 datasheet: 8 TB/s per GPU
    "GB200": 8.0 * TB,
    "B300": 8.0 * TB,  # HGX B300 datasheet: 8 TB/s per GPU
    "MI250X": 1.6384 * TB,
    "MI300X": 5.3 * TB,  # MI300X data sheet: 5.3 TB/s
    "MI325X": 6.0 * TB,  # MI325X data sheet: 6 TB/s
    "MI355X": 8.0 * TB,  # MI355X data sheet: 8 TB/s
    "Gaudi3": 3.67 * TB,  # Intel Gaudi 3 spec table (Hot Chips 2024): 3.67 TB/s
}
MEMORY_80GB: dict[str, float] = {"A100-SXM": 2.039 * TB, "A100-PCIe": 1.935 * TB}

# Board power in W per PEAKS row: the sheet's max TDP / TBP (configurable cards: their
# highest setting), the most the device may draw. Same sheets as the peaks: V100 SXM2 300,
# PCIe 250, V100S 250; A100 SXM 400, PCIe 300 (80GB; 40GB 250: the higher one); H100 SXM up
# to 700, PCIe 350; H200 SXM up to 700, NVL up to 600; H20 400; L40S 350; HGX B200 1000 per
# GPU; GB200 NVL72 1200 per GPU; HGX B300 1100 per GPU; MI250X 560 per OAM (two GCDs: 280
# each); MI300X 750; MI325X 1000; MI355X 1400; Gaudi 3 OAM (HL-325L) 900.
BOARD_POWER_W: dict[str, float] = {
    "V100-SXM2": 300.0,
    "V100-PCIe": 250.0,
    "V100S-PCIe": 250.0,
    "A100-SXM": 400.0,
    "A100-PCIe": 300.0,
    "H100-SXM": 700.0,
    "H100-PCIe": 350.0,
    "H200-SXM": 700.0,
    "H200-NVL": 600.0,
    "H20": 400.0,
    "L40S": 350.0,
    "B200": 1000.0,
    "GB200": 1200.0,
    "B300": 1100.0,
    "MI250X": 280.0,
    "MI300X": 750.0,
    "MI325X": 1000.0,
    "MI355X": 1400.0,
    "Gaudi3": 900.0,
}

# PCI device ids per row (PCI ID Repository, pci-ids.ucw.cz, vendors 10de and 1002: GV100
# SXM2 16/32GB 1db1/1db5, PCIe 16/32GB 1db4/1db6; GA100 SXM4 40/80GB 20b0/20b2, PCIe
# 40/80GB 20f1/20b5; GH100 H100 SXM5 80GB 2330, H100 PCIe 2331, H200 SXM 141GB 2335;
# Aqua Vanjaram MI300X 74a1, as its amdsmi asic_info reports it). Rows absent: not known.
PCI_DEVICE_IDS: dict[str, tuple[str, ...]] = {
    "V100-SXM2": ("0x1db1", "0x1db5"),
    "V100-PCIe": ("0x1db4", "0x1db6"),
    "A100-SXM": ("0x20b0", "0x20b2"),
    "A100-PCIe": ("0x20f1", "0x20b5"),
    "H100-SXM": ("0x2330",),
    "H100-PCIe": ("0x2331",),
    "H200-SXM": ("0x2335",),
    "MI300X": ("0x74a1",),
}


def pci_device_id(value: object) -> str | None:
    """A PCI device id as ``0x2330``: NVML's pciDeviceId (device << 16 | vendor), amdsmi's
    ``0x74a1`` or a recorded string; None for anything else."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return f"0x{(value >> 16 if value > 0xFFFF else value):04x}"
    if isinstance(value, str) and re.fullmatch(r"0x[0-9a-fA-F]{1,8}", value.strip()):
        return pci_device_id(int(value.strip(), 16))
    return None


# The FP8 e4m3 format of each architecture with FP8 units, as a torch dtype name. NVIDIA
# Hopper, Ada and Blackwell implement the OCP FP8 spec (e4m3 with NaN, no infinity:
# float8_e4m3fn; CUDA's __nv_fp8_e4m3). AMD CDNA 3 (MI300X, MI325X; gfx942) implements the
# earlier "fnuz" variant (no negative zero, bias 8: ROCm's __hip_fp8_e4m3_fnuz); CDNA 4
# (MI355X; gfx950) moved to OCP (ROCm 7 docs, "FP8 numbers": float8_e4m3fn on gfx950).
# Gaudi 3 implements OCP e4m3 (Intel Gaudi docs, "FP8 training"). Rows without FP8 units
# are absent.
FP8_FORMAT: dict[str, str] = {
    "H100-SXM": "float8_e4m3fn",
    "H100-PCIe": "float8_e4m3fn",
    "H200-SXM": "float8_e4m3fn",
    "H200-NVL": "float8_e4m3fn",
    "H20": "float8_e4m3fn",
    "L40S": "float8_e4m3fn",
    "B200": "float8_e4m3fn",
    "GB200": "float8_e4m3fn",
    "B300": "float8_e4m3fn",
    "MI300X": "float8_e4m3fnuz",
    "MI325X": "float8_e4m3fnuz",
    "MI355X": "float8_e4m3fn",
    "Gaudi3": "float8_e4m3fn",
}
# The FP8 format of a device with no row, by its vendor: ROCm before CDNA 4 used fnuz.
FP8_FORMAT_BY_VENDOR = {"nvidia": "float8_e4m3fn", "amd": "float8_e4m3fnuz"}

# PCIe bytes/s per lane and direction after line encoding (PCI-SIG base specs: 8b/10b to
# gen 2, 128b/130b gen 3-5, FLIT for gen 6).
PCIE_LANE_BYTES_PER_S = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}


class Links(NamedTuple):
    """A device's links per direction: to its peer GPUs and to its host."""

    gpu_link: str
    gpu_gbps: float
    host_link: str
    host_gbps: float


def _has(pattern: str, name: str) -> bool:
    return re.search(pattern, name) is not None


def row_for(name: str | None) -> str | None:
    """The PEAKS row of a device name as NVML/torch spell it; None when unknown.

    Strict on purpose: a wrong row gives a confident wrong percentage, so variants whose
    peaks differ (H100 NVL, GH200, GB300, MI300A, MI350X, L40) and MIG slices stay unknown.
    """
    if not name:
        return None
    n = name.upper()
    if _has(r"\bMIG\b", n):
        return None  # a MIG instance has only a fraction of the GPU's units
    pcie, sxm = "PCIE" in n, "SXM" in n
    if _has(r"\bV100S\b", n):
        return "V100S-PCIe" if pcie else None
    if _has(r"\bV100\b", n):
        return "V100-SXM2" if "SXM2" in n else "V100-PCIe" if pcie else None
    if _has(r"\bA100\b", n):
        return "A100-SXM" if sxm else "A100-PCIe" if pcie else None
    if _has(r"\bH100\b", n):
        if "NVL" in n:
            return None
        return "H100-PCIe" if pcie else "H100-SXM" if sxm or "HBM3" in n else None
    if _has(r"\bH200\b", n):
        return "H200-NVL" if "NVL" in n else None if pcie else "H200-SXM"
    # \b keeps H20 from H200, B200 from GB200
    for pattern, row in (
        (r"\bH20\b", "H20"),
        (r"\bL40S\b", "L40S"),
        (r"\bB200\b", "B200"),
        (r"\bB300\b", "B300"),
        (r"\bGAUDI ?3\b|\bHL-32[58]", "Gaudi3"),  # hl-smi names the OAM HL-325L
    ):
        if _has(pattern, n):
            return row
    if _has(r"\bGB200\b", n):
        return "GB200"
    if _has(r"\bMI250X\b", n):
        # ROCm may say "MI250X / MI250"; the MI250 (208 CUs, not 220) would be ~5% lower.
        return "MI250X"
    for row in ("MI300X", "MI325X", "MI355X"):
        if _has(rf"\b{row}\b", n):
            return row
    return None


def peak_flops(name: str | None, precision: str | None) -> float | None:
    """Published dense peak in FLOP/s for a device name and precision; None when unknown."""
    row = row_for(name)
    tflops = PEAKS[row].get(precision or "") if row else None
    return tflops * 1e12 if tflops else None


def percent_of_peak(
    name: str | None, precision: str | None, achieved: float | None
) -> float | None:
    """Achieved FLOP/s as a percentage of the device's peak; None when either is unknown."""
    peak = peak_flops(name, precision)
    if peak is None or achieved is None or not math.isfinite(achieved):
        return None
    return 100.0 * achieved / peak


match_device = row_for  # the name it had in milarun.measure.peaks


def peak_tflops(name: str | None, precision: str | None) -> float | None:
    """Published dense peak in TFLOP/s for a device name and precision; None when unknown."""
    flops = peak_flops(name, precision)
    return flops / 1e12 if flops else None


def memory_bandwidth(name: str | None, memory_bytes: int | None = None) -> float | None:
    """Datasheet memory bandwidth in bytes/s of a device name (``memory_bytes``: its memory
    size, which picks the A100 80 GB figure); None when unknown."""
    row = row_for(name)
    if row in MEMORY_80GB and memory_bytes and memory_bytes > 60e9:
        return MEMORY_80GB[row]
    return MEMORY_BYTES_PER_S.get(row or "")


def board_power_w(name: str | None) -> float | None:
    """The device's datasheet board power (its highest TDP/TBP) in W; None when unknown."""
    return BOARD_POWER_W.get(row_for(name) or "")


def fp8_format(name: str | None, vendor: str | None = None) -> str | None:
    """The torch dtype name of the device's FP8 e4m3 format; a device with no row takes its
    vendor's ("nvidia", "amd"); None when neither tells (or the row has no FP8 units)."""
    row = row_for(name)
    if row is not None:
        return FP8_FORMAT.get(row)
    return FP8_FORMAT_BY_VENDOR.get(vendor or "")


def links(name: str | None) -> Links | None:
    """The device's GPU-to-GPU and host links (GB/s per direction); None when unknown."""
    found = LINKS.get(row_for(name) or "")
    return Links(*found) if found else None


def pcie_bandwidth(gen: int | None, width: int | None) -> float | None:
    """Bytes/s per direction a PCIe link of this generation and width carries."""
    if not gen or not width or gen not in PCIE_LANE_BYTES_PER_S:
        return None
    return PCIE_LANE_BYTES_PER_S[gen] * width


# -- collective bandwidth (issue 51) --------------------------------------------------------
# The all-reduce bus bandwidth (nccl-tests' busbw: bytes x 2(n-1)/n per second) a healthy node
# of 8 GPUs reaches at its plateau (large messages), by the path NCCL took: "nvls" (NVLink
# SHARP: the NVSwitch reduces, NCCL's NVLS / NVLS_TREE algorithms) or "nvlink" (ring or tree
# over NVLink, no in-switch reduction). Sources: 8x H100 SXM ~480 GB/s with NVLS and ~370
# without (NVIDIA/nccl-tests issues #212 and #309); 8x H200 SXM 475 with NVLS (the same
# issues' H200 reports); H200 SXM without NVLS: the H100's 370, as both have NVLink 4 through
# the same NVSwitch generation (900 GB/s per GPU). Across nodes: ~48 GB/s of bus bandwidth per
# 400 Gb/s NIC (50 GB/s of line rate less the protocol's overhead; nccl-tests PERFORMANCE.md,
# busbw against the network's bandwidth). docs/doctor.md lists them with these sources.
ALLREDUCE_BUSBW: dict[tuple[str, str], float] = {
    ("H100-SXM", "nvls"): 480e9,
    ("H100-SXM", "nvlink"): 370e9,
    ("H200-SXM", "nvls"): 475e9,
    ("H200-SXM", "nvlink"): 370e9,
}
NIC_BUSBW_PER_400GBPS = 48e9  # bytes/s of all-reduce bus bandwidth per 400 Gb/s NIC
NVLS_ALGORITHMS = ("NVLS", "NVLS_TREE")


def collective_topology(algorithm: str | None) -> str:
    """The path a chosen NCCL algorithm takes inside a node: "nvls" (NVLink SHARP) or
    "nvlink" (ring, tree and anything else, judged against the lower figure)."""
    return "nvls" if (algorithm or "").upper() in NVLS_ALGORITHMS else "nvlink"


def allreduce_busbw(name: str | None, topology: str) -> float | None:
    """Bytes/s of all-reduce bus bandwidth a healthy 8-GPU node of this model reaches on this
    path; None where the datasheet has no figure (the verdict then says so)."""
    return ALLREDUCE_BUSBW.get((row_for(name) or "", topology))


def across_nodes_busbw(nics: int, gbps_each: float = 400.0) -> float:
    """Bytes/s of all-reduce bus bandwidth across nodes with ``nics`` NICs of this speed."""
    return NIC_BUSBW_PER_400GBPS * nics * gbps_each / 400.0
