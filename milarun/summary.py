"""Summary (the baseline format): per test, run counts and rate statistics."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from milarun import results


def stats(values: list[float]) -> dict[str, Any]:
    """{n, min, max, mean, std} with the population std; null stats when empty."""
    if not values:
        return {"n": 0, "min": None, "max": None, "mean": None, "std": None}
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / len(values)
    return {"n": len(values), "min": min(values), "max": max(values), "mean": mean,
            "std": math.sqrt(var)}


def _timer_rate(record: dict[str, Any]) -> float | None:
    rate = results.steady_rate(record.get("rates") or [], record.get("slice", 0.5))
    return rate if rate is not None and rate > 0 else None


def run_rate(result: dict[str, Any], timer: str = "train") -> float | None:
    """Steady examples/s of one successful result (None if it has none).

    A distributed result (``train_<rank>`` timers) counts all its ranks: the sum of their
    rates is the throughput of the k devices together.
    """
    if not result.get("success"):
        return None
    timings = result.get("timings") or {}
    prefix = f"{timer}_"
    ranks = [v for k, v in timings.items()
             if k.startswith(prefix) and k[len(prefix):].isdigit()]
    if ranks:
        rates = [_timer_rate(r) for r in ranks]
        return None if any(r is None for r in rates) else sum(rates)
    return _timer_rate(timings.get(timer) or {})


def summarize(loaded: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Group results by test name; a test whose runs all failed keeps null stats."""
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for result in loaded:
        by_name[result["name"]].append(result)
    out = {}
    for name in sorted(by_name):
        runs = by_name[name]
        rates, pergpu, peaks = [], defaultdict(list), []
        failures = 0
        for run in runs:
            rate = run_rate(run)
            if rate is None:
                failures += 1
                continue
            rates.append(rate)
            pergpu[str(run.get("device"))].append(rate)
            peak = _peak_memory(run)
            if peak is not None:
                peaks.append(peak)
        out[name] = {
            "n": len(runs),
            "failures": failures,
            "total": sum(rates),
            "train": stats(rates),
            "pergpu": {device: stats(v) for device, v in sorted(pergpu.items())},
            "peak_memory": max(peaks) if peaks else None,
        }
    return out


def _peak_memory(result: dict[str, Any]) -> float | None:
    """Largest memory use seen by the monitors, in MiB (GPU memory when there is one)."""
    gpu = (result.get("gpu_monitor") or {}).get("samples") or []
    used = [g["memory"][0] for s in gpu for g in (s.get("gpus") or {}).values()
            if g.get("memory")]
    if used:
        return max(used)
    cpu = (result.get("cpu_monitor") or {}).get("samples") or []
    rss = [s["rss_mb"] for s in cpu if "rss_mb" in s]
    return max(rss) if rss else None
