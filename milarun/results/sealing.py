"""Sealing a loaded result for reports that read it many times: its monitor samples
dropped (most of its size), what reports read of them kept, its rate and node read once."""

from __future__ import annotations

from typing import Any

from milarun.results.parts import monitor_peak
from milarun.results.read import PEAK_MEMORY, SEALED, ResultView


def drop_samples(data: dict[Any, Any]) -> float | None:
    """Drop a result's monitor samples (most of its size) and return what reports use of
    them, the peak memory (what else is read of them, results.upgrade read at load)."""
    peak = monitor_peak(data)
    for key in ("gpu_monitor", "cpu_monitor", "node_monitor"):
        monitor = data.get(key)
        if isinstance(monitor, dict) and monitor.get("samples"):
            data[key] = {**monitor, "samples": []}
    return peak


def seal(data: dict[Any, Any], peak: float | None = None, *, digested: bool = False) -> None:
    """A result read from a file and checked, made ready for reports that read it many
    times: its samples dropped (drop_samples), their peak kept (``digested``: ``peak``, the
    one a folder's digest kept of them); the result is not changed after, so that its
    view may remember what it read."""
    found = drop_samples(data)
    data[PEAK_MEMORY] = peak if digested else found
    data[SEALED] = True
    # Its rate and node, read now: where bulk.read_folders reads in worker processes, this is
    # done there, in parallel (the series are dropped, as the result holds them already).
    view = ResultView.from_dict(data)
    rate, node = view.rate(), view.node
    view._memo.clear()
    view._memo.update({("rate", "train"): rate, "node": node})
