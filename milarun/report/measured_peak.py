"""The measured peak: what the ``gemm`` test reached on a device, per precision.

A test's ``percent_of_peak`` divides its achieved FLOP/s by the datasheet's dense peak; a
datasheet peak is rarely reached (an H100's bf16 GEMMs run near 80% of it). When the folder
also holds a ``gemm`` result of the same device (the same ``efficiency.device_name``), each
test's achieved FLOP/s is also given as a percentage of the best TFLOP/s ``gemm`` measured
in the test's precision (its ``tflops_<precision>[_<m>x<n>x<k>]`` metrics): how far the
workload is from what this device's matrix units do in practice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from milarun import results
from milarun.results import read

GEMM_TEST = "gemm"
_METRIC = re.compile(r"tflops_(fp32|tf32|fp16|bf16|fp8)(?:_\d+x\d+x\d+)?")

Peaks = Mapping[tuple[str, str], float]


def measured_peaks(loaded: Iterable[read.ResultView]) -> dict[tuple[str, str], float]:
    """(device name, precision) -> the best FLOP/s a successful ``gemm`` run measured."""
    peaks: dict[tuple[str, str], float] = {}
    for view in loaded:
        if view.name.rsplit(".", 1)[-1] != GEMM_TEST:
            continue
        efficiency = view.efficiency
        device = efficiency.device_name if efficiency is not None else None
        if not view.success or not isinstance(device, str):
            continue
        for key, value in view.metrics.items():
            found = _METRIC.fullmatch(str(key))
            if found and results.is_finite(value) and value > 0:
                slot = (device, found[1])
                peaks[slot] = max(peaks.get(slot, 0.0), float(value) * 1e12)
    return peaks


def percent_of_measured(view: read.ResultView, peaks: Peaks) -> float | None:
    """A run's achieved FLOP/s as a percentage of its device's measured peak in its
    precision; None without a ``gemm`` result of that device and precision, and for ``gemm``
    itself (its figure against its own best shape says nothing of a workload)."""
    eff = view.efficiency
    if eff is None or view.name.rsplit(".", 1)[-1] == GEMM_TEST:
        return None
    achieved = eff.achieved_flops
    peak = peaks.get((str(eff.device_name), str(eff.precision)))
    if not peak or achieved is None or not results.is_finite(achieved):
        return None
    return 100.0 * float(achieved) / peak
