"""The internal consistency of a result: what a hand-edited rate or count breaks.

The rate log (milarun.measure.ratelog) closes a slice every ``slice`` seconds of in-block
time, so a rate series obeys two identities: its slices (plus the warm-up blocks' time and
the partial last slice) cover exactly the in-block time, and its rates times their widths
add up to the examples counted minus the warm-up blocks' (a few blocks' worth). A file
whose name says another test, job or outcome than its content is inconsistent too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from milarun import results
from milarun.results import read

RELATIVE = 1e-6  # float sums of thousands of slices agree far better than this
WARMUP_SLACK = 4  # warm-up blocks may hold up to this many average blocks of examples


def _number(record: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    value = record.get(key, default)
    return float(value) if results.is_finite(value) else math.nan


def rate_problem(timer: str, record: Mapping[str, Any]) -> str | None:
    """Why a ``timings`` entry of type rate contradicts itself, or None."""
    rates = record.get("rates") or []
    if not all(results.is_finite(r) for r in rates):
        return f"{timer}: a rate that is not a number"
    width, partial = _number(record, "slice", 0.5), record.get("last_slice")
    last = float(partial) if partial is not None and results.is_finite(partial) and rates else None
    full = len(rates) - (1 if last is not None else 0)
    in_block, duration = _number(record, "in_block"), _number(record, "duration")
    warm_time = _number(record, "warmup_time")
    covered = warm_time + full * width + (last or 0.0)
    if not abs(covered - in_block) <= RELATIVE * max(in_block, 1.0):
        return f"{timer}: {len(rates)} slices cover {covered:.6g} s, in-block time {in_block:.6g} s"
    if not in_block <= duration * (1 + RELATIVE) + RELATIVE:
        return f"{timer}: in-block time {in_block:.6g} s exceeds its duration {duration:.6g} s"
    count, blocks = _number(record, "count"), _number(record, "blocks")
    if not all(math.isfinite(v) for v in (count, blocks, in_block, duration, warm_time)):
        return f"{timer}: a count or time that is not a number"
    sliced = math.fsum(r * width for r in rates[:full]) + (rates[-1] * last if last else 0.0)
    unsliced = count - sliced  # the warm-up blocks' examples
    tolerance = RELATIVE * max(count, 1.0) + 1
    if unsliced < -tolerance:
        return f"{timer}: its rates make {sliced:,.0f} examples, more than the {count:,.0f} counted"
    per_block = count / blocks if blocks > 0 else math.inf
    warm_blocks = _number(record, "warmup_blocks")
    if unsliced > WARMUP_SLACK * warm_blocks * per_block + tolerance:
        return (
            f"{timer}: its rates make {sliced:,.0f} examples, fewer than the {count:,.0f} "
            "counted less the warm-up"
        )
    ends = record.get("slice_ends") or []
    if not isinstance(ends, list) or (ends and len(ends) != len(rates)):
        return f"{timer}: its slice ends do not match its {len(rates)} slices"
    return None


def result_problem(view: read.ResultView, path: Path) -> str | None:
    """Why one result contradicts its file name or itself, or None."""
    parsed = results.parse_filename(path.name)
    if (
        parsed is None
        or parsed["name"] != view.name
        or parsed["job_id"] != view.job_id
        or parsed["failed"] == view.success
    ):
        return f"{path.name}: its name says another test, job or outcome than its content"
    for timer, record in view.timings.items():
        if isinstance(record, Mapping) and record.get("type") == "rate":
            problem = rate_problem(timer, record)
            if problem:
                return f"{path.name}: {problem}"
    return None
