"""The numbers behind `doctor --active`'s verdicts: a sample's mean and CI, the sibling test,
the datasheet figures (GEMM peaks from milarun.measure.peaks, memory and PCIe bandwidth here)
and the thresholds. No torch.

- Sibling test: a device (or slice, or GPU pair) is compared with the others of its kind on
  the same node, measured at the same time: its mean over the median of their means (the
  ratio), and the one-sided Welch t-test of its samples against theirs pooled (the one
  ``report --compare-nodes`` uses: milarun.report.significance). It is flagged when both
  say so: ratio below MARGIN (0.95) and p below ALPHA (0.01). A flagged unit FAILs below
  SIBLING_FAIL (0.8 of its siblings), else WARNs. A bare percentage would flag noise; the test
  alone would flag a 1% gap measured precisely.
- Datasheet: the measured figure as a share of the published one. A healthy GPU reaches
  60-80% of its dense GEMM peak with one large product, 80-90% of its memory bandwidth with
  a copy and 75-90% of its PCIe link per direction; the thresholds below sit well under that
  so that only a sick device falls under them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from milarun.doctor.check import FAIL, PASS, WARN
from milarun.measure import peaks
from milarun.report.significance import significantly_slower, slower_p

SIBLING_FAIL = 0.8  # a flagged unit under 80% of its siblings' median FAILs
GEMM_SHARE = {WARN: 0.5, FAIL: 0.3}  # of the datasheet peak: under 50% WARN, under 30% FAIL
MEMORY_SHARE = {WARN: 0.6, FAIL: 0.4}  # of the datasheet memory bandwidth
PCIE_SHARE = {WARN: 0.6, FAIL: 0.45}  # of what the link's generation and width carry
CLOCK_SHARE = 0.6  # median SM clock under load / max SM clock: under it, WARN

# Datasheet memory bandwidth in GB/s per PEAKS row (the A100's depends on its memory: 80 GB
# rows below). MI250X: per GCD (half of the 3.2768 TB/s package).
MEMORY_GBPS: dict[str, float] = {
    "V100-SXM2": 900.0,
    "V100-PCIe": 900.0,
    "V100S-PCIe": 1134.0,
    "A100-SXM": 1555.0,
    "A100-PCIe": 1555.0,
    "H100-SXM": 3350.0,
    "H100-PCIe": 2000.0,
    "H200-SXM": 4800.0,
    "H20": 4000.0,
    "L40S": 864.0,
    "B200": 8000.0,
    "GB200": 8000.0,
    "MI250X": 1638.4,
    "MI300X": 5300.0,
    "MI325X": 6000.0,
    "MI355X": 8000.0,
    "H200-NVL": 4800.0,  # NVIDIA H200 datasheet: 4.8 TB/s, SXM and NVL alike
    "B300": 8000.0,  # NVIDIA HGX B300 datasheet: 8 TB/s per GPU
    "Gaudi3": 3670.0,  # Intel Gaudi 3 spec table (Hot Chips 2024): 3.67 TB/s
}
MEMORY_80GB = {"A100-SXM": 2039.0, "A100-PCIe": 1935.0}

# PCIe GB/s per lane and direction after line encoding (8b/10b to gen 2, 128b/130b gen 3-5,
# FLIT for gen 6).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


@dataclass(frozen=True)
class Figure:
    """A measurement's samples summarised: mean and the half-width of its 95% CI."""

    mean: float
    ci: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Figure:
        from scipy import stats

        n = len(samples)
        mean = math.fsum(samples) / n
        if n < 2:
            return cls(mean, math.nan, n)
        ci = float(stats.t.ppf(0.975, n - 1)) * statistics.stdev(samples) / math.sqrt(n)
        return cls(mean, ci, n)

    def text(self, unit: str) -> str:
        ci = f" ±{self.ci:,.3g}" if math.isfinite(self.ci) else ""
        return f"{self.mean:,.4g}{ci} {unit} (95% CI, {self.n} samples)"


@dataclass(frozen=True)
class Sibling:
    ratio: float  # the unit's mean / the median of its siblings' means
    p_value: float | None
    status: str  # PASS, WARN or FAIL

    def text(self, kind: str) -> str:
        p = f", one-sided Welch p={self.p_value:.2g}" if self.p_value is not None else ""
        slow = " (significantly slower)" if self.status != PASS else ""
        return f"{self.ratio:.2f}x the median of the other {kind}s{p}{slow}"


def sibling(unit: str, samples: Mapping[str, Sequence[float]]) -> Sibling | None:
    """``unit`` against the other units of ``samples``; None without another unit."""
    others = [u for u in samples if u != unit and samples[u]]
    if not samples.get(unit) or not others:
        return None
    median = statistics.median(math.fsum(samples[u]) / len(samples[u]) for u in others)
    mine = samples[unit]
    ratio = (math.fsum(mine) / len(mine)) / median if median > 0 else math.inf
    pooled = [v for u in others for v in samples[u]]
    import numpy as np

    p, _ = slower_p([(np.asarray(mine, dtype=float), np.asarray(pooled, dtype=float))])
    flagged = p is not None and significantly_slower(ratio, p)
    status = (FAIL if ratio < SIBLING_FAIL else WARN) if flagged else PASS
    return Sibling(ratio, p, status)


def share_status(share: float, thresholds: dict[str, float]) -> str:
    if share < thresholds[FAIL]:
        return FAIL
    return WARN if share < thresholds[WARN] else PASS


def gemm_peak(name: str | None, precision: str) -> tuple[str, float] | None:
    """(the datasheet row, its dense TFLOP/s) for a GPU name and precision."""
    row = peaks.match_device(name)
    flops = peaks.peak_flops(name, precision)
    return (row, flops / 1e12) if row and flops else None


def memory_peak(name: str | None, memory_bytes: int | None) -> tuple[str, float] | None:
    """(the datasheet row, its memory bandwidth in GB/s) for a GPU name."""
    row = peaks.match_device(name)
    if row is None or row not in MEMORY_GBPS:
        return None
    if row in MEMORY_80GB and memory_bytes and memory_bytes > 60e9:
        return row, MEMORY_80GB[row]
    return row, MEMORY_GBPS[row]


def pcie_gbps(gen: int | None, width: int | None) -> float | None:
    """GB/s per direction a PCIe link of this generation and width carries."""
    if not gen or not width or gen not in PCIE_LANE_GBPS:
        return None
    return PCIE_LANE_GBPS[gen] * width
