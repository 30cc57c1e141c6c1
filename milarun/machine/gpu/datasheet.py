"""The datasheet peaks: dense TFLOP/s per device and precision, and the row of a device name.

No torch import: ``milarun report`` reads these without it.
"""

from __future__ import annotations

import math
import re

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


def _has(pattern: str, name: str) -> bool:
    return re.search(pattern, name) is not None


def match_device(name: str | None) -> str | None:
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
    row = match_device(name)
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
