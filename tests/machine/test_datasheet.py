"""The one datasheet (milarun.machine.gpu.datasheet): its lookups, and that it is the only
module of milarun that writes a GPU figure (no branch on a vendor outside machine/gpu/:
tests/machine/test_vendor_branches.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from milarun.machine.gpu import datasheet

PACKAGE = Path(datasheet.__file__).resolve().parents[2]
GPU_WING = PACKAGE / "machine" / "gpu"


def test_every_row_has_its_figures():
    for row in datasheet.PEAKS:
        assert row in datasheet.MEMORY_BYTES_PER_S, row
        assert row in datasheet.BOARD_POWER_W, row
        fp8 = datasheet.PEAKS[row]["fp8"]
        assert (row in datasheet.FP8_FORMAT) == bool(fp8), row


@pytest.mark.parametrize(
    ("name", "tflops", "bandwidth", "watts", "fp8"),
    [
        ("NVIDIA H100 80GB HBM3", 989.5, 3.35e12, 700.0, "float8_e4m3fn"),
        ("AMD Instinct MI300X", 1307.4, 5.3e12, 750.0, "float8_e4m3fnuz"),
        ("AMD Instinct MI325X", 1307.4, 6.0e12, 1000.0, "float8_e4m3fnuz"),
        ("AMD Instinct MI355X", 2516.6, 8.0e12, 1400.0, "float8_e4m3fn"),
        ("Tesla V100-SXM2-16GB", None, 0.9e12, 300.0, None),
    ],
)
def test_lookups(name, tflops, bandwidth, watts, fp8):
    assert datasheet.peak_tflops(name, "bf16") == tflops
    assert datasheet.memory_bandwidth(name) == pytest.approx(bandwidth)
    assert datasheet.board_power_w(name) == watts
    assert datasheet.fp8_format(name) == fp8


def test_unknown_devices():
    assert datasheet.row_for("NVIDIA H100 NVL") is None
    assert datasheet.memory_bandwidth("Some GPU") is None
    assert datasheet.board_power_w(None) is None
    # an unknown device takes its vendor's FP8 format; no vendor, no format
    assert datasheet.fp8_format("AMD Instinct MI300A", "amd") == "float8_e4m3fnuz"
    assert datasheet.fp8_format("NVIDIA H100 NVL", "nvidia") == "float8_e4m3fn"
    assert datasheet.fp8_format("Some GPU") is None


def test_a100_memory_by_size():
    small = datasheet.memory_bandwidth("NVIDIA A100-SXM4-40GB", 40 * 2**30)
    large = datasheet.memory_bandwidth("NVIDIA A100-SXM4-80GB", 80 * 2**30)
    assert small == pytest.approx(1.555e12) and large == pytest.approx(2.039e12)


def test_links_and_pcie():
    found = datasheet.links("NVIDIA H100 80GB HBM3")
    assert found is not None and found.gpu_gbps == 450.0
    assert datasheet.pcie_bandwidth(5, 16) == pytest.approx(63.008e9)
    assert datasheet.pcie_bandwidth(None, 16) is None


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, path.read_text()


# a datasheet peak written as a literal: any of the table's TFLOP/s figures (those over
# 100, which no other table of milarun holds) with a device name near it
PEAK_FIGURES = {
    v for row in datasheet.PEAKS.values() for v in row.values() if v and v >= 100 and v % 1
}


def test_only_the_datasheet_writes_peak_figures():
    found = []
    for path, text in _modules():
        if path == Path(datasheet.__file__).resolve():
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, float):
                if node.value in PEAK_FIGURES or node.value * 1e-12 in PEAK_FIGURES:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value}")
            if isinstance(node, ast.Dict) and len(node.keys) >= 3:
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                if len(keys & set(datasheet.PEAKS)) >= 3:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} a per-device table")
    assert not found, f"GPU figures outside machine/gpu/datasheet.py: {found}"


# A vendor compared, or any other branch on the vendor, outside milarun/machine/gpu/:
# tests/machine/test_vendor_branches.py.
