"""A result's rate against the records measured beside it: the GPU monitor's samples and
the energy record made of them, the FLOPs of a step, the datasheet's peak and the peak the
doctor measured on the same device.

- energy: over the steady window the GPU's energy counter (or its power, integrated) gives
  the joules, the rates give the examples; both are re-made here from the samples and the
  slices by the code that made them (measure.energy), so they agree to the last digits.
- FLOPs: ``achieved_flops`` is FLOPs per example x the steady rate; a step's FLOPs are the
  sum of its precisions'.
- peaks: the time a step's FLOPs need at the datasheet's dense peak of each precision
  (machine.gpu.datasheet, this milarun's table, not the result's) cannot exceed the time they took;
  nor, by more than a measurement's noise, at the best GEMM rate ``doctor --active`` measured
  on that device in the same run folder.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from milarun.machine.gpu import datasheet
from milarun.measure import energy
from milarun.results import is_finite, series
from milarun.results.parts import number
from milarun.results.read import ResultView
from milarun.results.records import RateRecord

EXACT = 1e-9  # a figure re-made from the same numbers by the same code
SHEET = 0.02  # the datasheets' own rounding (datasheet.PEAKS: 2 x 1100 is 2% below 2250)
DOCTOR = 1.25  # a run's FLOP/s over the doctor's best GEMM sample of its device
DOCTOR_PASS = "PASS"
# measurements of a doctor record per device label: "gemm_<precision>" in TFLOP/s
Measured = Mapping[str, Mapping[str, float]]  # device label -> precision -> best FLOP/s


def _n(value: Any) -> str:
    return f"{float(value):,.10g}" if is_finite(value) else str(value)[:40]


def _differs(a: Any, b: Any) -> bool:
    """Whether two figures that should be the same number are not (None: absent)."""
    if a is None or b is None:
        return (a is None) != (b is None)
    if not (is_finite(a) and is_finite(b)):
        return True
    return abs(a - b) > EXACT * max(abs(a), abs(b), 1e-300)


def energy_problems(view: ResultView, records: dict[str, RateRecord], file: str) -> list[str]:
    """The energy record against its monitor samples and its rates."""
    said = view.energy
    if said is None:
        return []
    remade = energy.energy_record(view.device, records, view.gpu_monitor)
    problems = []
    for field, source in (
        ("examples", "the rates over the steady window make"),
        ("joules", "gpu_monitor's samples over the steady window give"),
        ("seconds", "the steady window's slice times make"),
    ):
        ours, theirs = getattr(remade, field), getattr(said, field)
        if _differs(theirs, ours):
            why = remade.reason if ours is None else None
            ours_text = f"none ({why})" if why else _n(ours)
            problems.append(f"{file}: energy.{field} {_n(theirs)} but {source} {ours_text}")
    if problems:
        return problems[:1]
    if remade.joules is None:  # nothing measured: no figure may say otherwise
        for field in ("watts", "examples_per_joule", "joules_per_example"):
            if getattr(said, field) is not None:
                return [
                    f"{file}: energy.{field} {_n(getattr(said, field))} but gpu_monitor's "
                    f"samples give no energy ({remade.reason})"
                ]
    joules, seconds, examples = said.joules, said.seconds, said.examples
    if not (is_finite(joules) and is_finite(seconds) and is_finite(examples)):
        return []
    for field, theirs, ours, how in (
        ("watts", said.watts, joules / seconds if seconds else None, "joules / seconds"),
        ("examples_per_joule", said.examples_per_joule, examples / joules if joules else None,
         "examples / joules"),
        ("joules_per_example", said.joules_per_example, joules / examples if examples else None,
         "joules / examples"),
    ):  # fmt: skip
        if _differs(theirs, ours):
            return [f"{file}: energy.{field} {_n(theirs)} but its {how} make {_n(ours)}"]
    return []


def _steady(records: dict[str, RateRecord]) -> dict[str, float]:
    found = {k: series.measured_rate(r.rates, r.slice) for k, r in records.items()}
    return {k: v for k, v in found.items() if v is not None}


def _shares(view: ResultView) -> dict[str, float]:
    """The share of a step's FLOPs in each precision (its dominant one alone where the
    record has no split)."""
    eff = view.efficiency
    split = eff.flops_by_precision if eff is not None else None
    found = {str(p): float(f) for p, f in (split or {}).items() if is_finite(f) and f > 0}
    total = math.fsum(found.values())
    if total > 0:
        return {p: f / total for p, f in found.items()}
    precision = eff.precision if eff is not None else None
    return {precision: 1.0} if isinstance(precision, str) else {}


def flops_problems(
    view: ResultView,
    records: dict[str, RateRecord],
    file: str,
    measured: Measured,
    *,
    row: str | None = None,
    milarun_flops: float | None = None,
    precision: str | None = None,
) -> list[str]:
    """FLOPs per example against the rate, the step, the datasheet and the doctor. ``row``:
    the datasheet row of the device the system record names (milarun.tender.bounds);
    ``milarun_flops``, ``precision``: milarun's FLOPs per example and their precision, which
    the peaks bound (else the bid's)."""
    eff = view.efficiency
    said = number(eff.flops_per_example) if eff is not None else None
    per_example = milarun_flops or said
    if eff is None or per_example is None or per_example <= 0:
        return []
    steady = _steady(records)
    achieved = number(eff.achieved_flops)
    if achieved is not None and steady:
        made = {k: (said or 0.0) * rate for k, rate in steady.items()}
        if all(_differs(achieved, v) for v in made.values()):
            key = "train" if "train" in made else min(made)
            return [
                f"{file}: efficiency.achieved_flops {_n(achieved)} but flops_per_example x "
                f"timings.{key}'s steady rate make {_n(made[key])}"
            ]
    step, split = number(eff.flops_per_step), eff.flops_by_precision
    if step is not None and step > 0:
        parts = [f for f in (split or {}).values() if is_finite(f)]
        if parts and _differs(math.fsum(parts), step):
            return [
                f"{file}: efficiency.flops_per_step {_n(step)} but its flops_by_precision "
                f"add up to {_n(math.fsum(parts))}"
            ]
    shares = {precision: 1.0} if precision and milarun_flops else _shares(view)
    return _peak_problems(view, steady, per_example, file, measured, row, shares)


def _per_device(view: ResultView, steady: dict[str, float]) -> tuple[str, float, int] | None:
    """The rate one device sustained: each rank's on its own device, else the result's over
    the devices it used; with the record it comes from."""
    ranks = {k: v for k, v in steady.items() if k.startswith("train_") and k[6:].isdigit()}
    if ranks:
        key = max(ranks, key=ranks.__getitem__)
        return key, ranks[key], 1
    rate = view.rate()
    if rate is None:
        return None
    return "train", rate, max(1, len(view.devices))


def _peak_problems(
    view: ResultView,
    steady: dict[str, float],
    per_example: float,
    file: str,
    measured: Measured,
    row: str | None,
    shares: dict[str, float],
) -> list[str]:
    found = _per_device(view, steady)
    eff = view.efficiency
    if found is None or not shares or eff is None:
        return []
    key, rate, devices = found
    need = rate * per_example / devices  # FLOP/s one device did
    text = f"timings.{key}'s steady rate {_n(rate)} x {_n(per_example)} FLOP/example"
    if row is not None:
        sheet = {p: v * 1e12 for p, v in datasheet.PEAKS[row].items() if v}
        fastest = max(sheet.values())
        busy = math.fsum(need * s / sheet.get(p, fastest) for p, s in shares.items())
        if busy > 1 + SHEET:
            return [
                f"{file}: {text} need {need / 1e12:,.1f} TFLOP/s per device, {busy:.0%} of "
                f"the {row} datasheet's dense peak ({_peak_text(shares, sheet)}): impossible"
            ]
    best = measured.get(view.device)
    if best and all(p in best for p in shares):
        busy = math.fsum(need * s / best[p] for p, s in shares.items())
        if busy > DOCTOR:
            return [
                f"{file}: {text} need {need / 1e12:,.1f} TFLOP/s, {busy:.0%} of the best "
                f"GEMM `doctor --active` measured on {view.device} "
                f"({_peak_text(shares, best)}; more than {DOCTOR:.0%})"
            ]
    return []


def _peak_text(shares: dict[str, float], peak: Mapping[str, float]) -> str:
    fastest = max(peak.values())
    return ", ".join(f"{p} {peak.get(p, fastest) / 1e12:,.1f} TFLOP/s" for p in sorted(shares))


def doctor_peaks(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per device label, per precision: the best GEMM FLOP/s of the PASS doctor records of
    a folder (a record that did not pass measured a machine not in its state)."""
    best: dict[str, dict[str, float]] = {}
    for data in records:
        if data.get("verdict") != DOCTOR_PASS:
            continue
        for label, found in data["measurements"].items():
            for name, m in found.items() if isinstance(found, dict) else ():
                kind, _, precision = str(name).partition("_")
                if kind != "gemm" or not isinstance(m, dict) or m.get("unit") != "TFLOP/s":
                    continue
                top = max(m["samples"], default=0.0) * 1e12
                mine = best.setdefault(str(label), {})
                if top > mine.get(precision, 0.0):
                    mine[precision] = top
    return best


def read_doctors(folder: Path) -> list[dict[str, Any]]:
    """The readable doctor --active records of one run folder (milarun.doctor.active.record
    checks every field; an unreadable one is verify's note, not evidence)."""
    from milarun.doctor.active import record
    from milarun.errors import InputError
    from milarun.results import DOCTOR_RECORD

    found = []
    for path in sorted(folder.glob(f"{DOCTOR_RECORD}*.json"))[:100]:
        try:
            found.append(record.read(path))
        except InputError:
            continue
    return found
