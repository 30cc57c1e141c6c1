"""The rule of ``milarun verify`` on the inference tests' latencies: every successful
inference run within the tender's limits on TTFT and TPOT at p99 and above its goodput floor
(milarun.results.tender_rules: TenderRules' latency fields; the buyer's file sets them,
none by default).

The figures are the result's own (milarun.results.inference: measured by milarun's client,
milarun.measure.loadgen); a run that has no figure a limit needs (llm-decode has no TTFT
percentile) is named as unbounded, not failed.
"""

from __future__ import annotations

from milarun.tender.rule import Bid, Ruling
from milarun.tender.rule import some as _some

# limit key -> (the figure it bounds, True for a ceiling / False for a floor, its words)
BOUNDS = {
    "max_ttft_p99_ms": ("ttft_p99_ms", True, "TTFT p99 <= {:g} ms"),
    "max_tpot_p99_ms": ("tpot_p99_ms", True, "TPOT p99 <= {:g} ms"),
    "min_goodput_percent": ("goodput_percent", False, "goodput >= {:g}%"),
}


def latency(bid: Bid) -> Ruling:
    limits = {k: v for k in BOUNDS if (v := getattr(bid.tender.rules, k)) is not None}
    served = [(v, i) for v in bid.views if v.rate() is not None and (i := v.inference)]
    if not limits:
        return Ruling("latency", True, "the tender sets no latency limit")
    applied = ", ".join(BOUNDS[k][2].format(v) for k, v in limits.items())
    if not served:
        return Ruling("latency", True, f"no inference run to hold to {applied}")
    over, unbounded = [], []
    for view, found in served:
        for key, limit in limits.items():
            figure, ceiling, _ = BOUNDS[key]
            value = found.figures.get(figure)
            if value is None:
                unbounded.append(f"{view.name} J{view.job_id} ({figure})")
            elif (value > limit) if ceiling else (value < limit):
                over.append(f"{view.name} J{view.job_id}: {figure} {value:.4g}")
    if over:
        return Ruling("latency", False, f"runs beyond {applied}: {_some(over)}")
    note = f"; without the figure: {_some(unbounded)}" if unbounded else ""
    return Ruling("latency", True, f"{len(served)} inference run(s) within {applied}{note}")
