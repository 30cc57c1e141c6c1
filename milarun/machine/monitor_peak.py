"""The peak memory a monitor's samples show, in MiB: the writer keeps it in the monitor's
record (machine.monitors), a reader takes it from there or, in a file that has none, from
the samples (results.read.monitor_peak). Samples are typed here, where they are read: the
same plain loops over JSON's dicts and lists whether the samples were just taken or come
from a file nobody checked."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

# The keys of the peaks in the monitors' records
GPU_PEAK = "peak_memory_mib"  # the largest memory used on any of the monitor's GPUs
CPU_PEAK = "peak_rss_mib"  # the largest resident memory of the process tree


def _peak(best: float, value: Any) -> float:
    # type() rather than isinstance: a bool is no number, and this runs per sample
    if type(value) in (int, float) and best < value < math.inf:  # NaN compares False
        return float(value)
    return best


def gpu_peak(samples: Iterable[Any]) -> float | None:
    """The largest used memory of any GPU in the GPU monitor's samples."""
    best = -math.inf
    for sample in samples:
        gpus = sample.get("gpus") if type(sample) is dict else None
        for one in gpus.values() if type(gpus) is dict else ():
            memory = one.get("memory") if type(one) is dict else None
            if type(memory) is list and memory:
                best = _peak(best, memory[0])
    return None if best == -math.inf else best


def cpu_peak(samples: Iterable[Any]) -> float | None:
    """The largest RSS in the CPU monitor's samples."""
    best = -math.inf
    for sample in samples:
        if type(sample) is dict:
            best = _peak(best, sample.get("rss_mb"))
    return None if best == -math.inf else best


def kept_peak(record: Any, key: str) -> float | None:
    """The peak a monitor's record keeps under ``key``, when it is a usable number."""
    value: Any = record.get(key) if type(record) is dict else None
    if type(value) in (int, float) and 0 <= value < math.inf:  # not a bool, NaN or inf
        return float(value)
    return None
