"""The numbers behind `doctor --active`'s verdicts: a sample's mean and CI, the sibling test,
the datasheet figures (GEMM peaks, memory and PCIe bandwidth: milarun.machine.gpu.datasheet)
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
from milarun.machine.gpu import datasheet
from milarun.report.render.format import plain
from milarun.report.significance import significantly_slower, slower_p

SIBLING_FAIL = 0.8  # a flagged unit under 80% of its siblings' median FAILs
GEMM_SHARE = {WARN: 0.5, FAIL: 0.3}  # of the datasheet peak: under 50% WARN, under 30% FAIL
MEMORY_SHARE = {WARN: 0.6, FAIL: 0.4}  # of the datasheet memory bandwidth
PCIE_SHARE = {WARN: 0.6, FAIL: 0.45}  # of what the link's generation and width carry
CLOCK_SHARE = 0.6  # median SM clock under load / max SM clock: under it, WARN


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
        ci = f" ±{plain(self.ci, 3)}" if math.isfinite(self.ci) else ""  # never e-notation
        return f"{plain(self.mean, 4)}{ci} {unit} (95% CI, {self.n} samples)"


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
    row = datasheet.row_for(name)
    tflops = datasheet.peak_tflops(name, precision)
    return (row, tflops) if row and tflops else None


def memory_peak(name: str | None, memory_bytes: int | None) -> tuple[str, float] | None:
    """(the datasheet row, its memory bandwidth in GB/s) for a GPU name."""
    row = datasheet.row_for(name)
    found = datasheet.memory_bandwidth(name, memory_bytes)
    return (row, found / 1e9) if row and found else None


def pcie_gbps(gen: int | None, width: int | None) -> float | None:
    """GB/s per direction a PCIe link of this generation and width carries."""
    found = datasheet.pcie_bandwidth(gen, width)
    return found / 1e9 if found else None
