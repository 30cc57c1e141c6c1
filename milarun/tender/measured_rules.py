"""The rules of ``milarun verify`` on how the runs were measured: enough steady slices, no
throttling fault, no busy machine, slices and times that agree, runs alike."""

from __future__ import annotations

from milarun.results import read, series
from milarun.results.throttle import read as read_throttle
from milarun.tender.consistency import result_problem
from milarun.tender.rule import Bid, Ruling
from milarun.tender.rule import some as _some


def _good_series(bid: Bid) -> list[tuple[read.ResultView, series.RateSeries]]:
    return [
        (v, s)
        for v in bid.views
        if v.rate() is not None
        for s in (v.rank_series() or [v.series()])
        if s is not None
    ]


def steady(bid: Bid) -> Ruling:
    need = bid.tender.rules.min_steady_slices
    counts = [(len(s.steady_slices), v) for v, s in _good_series(bid)]
    if not counts:
        return Ruling("steady", False, "no successful run")
    short = [f"{v.name} J{v.job_id}: {n}" for n, v in counts if n < need]
    fewest = min(n for n, _ in counts)
    if short:
        return Ruling("steady", False, f"runs with fewer than {need} steady slices: {_some(short)}")
    return Ruling("steady", True, f"every run has >= {need} steady slices (fewest {fewest})")


def throttle(bid: Bid) -> Ruling:
    """Steady slices a fault slowed (thermal, hardware slowdown, power brake) against the
    tender's limit; slices at the power limit are the GPU's operating point, said beside."""
    window = faults = limited = 0
    clocks: list[tuple[float, str]] = []
    for v in bid.views:
        if v.rate() is None:
            continue
        found = read_throttle(v.diagnostics().throttle)
        if found is not None:
            window += found.window_slices
            faults += found.fault_slices
            limited += found.power_limit_slices
            if found.sm_clock_mhz is not None:
                clocks.append((found.sm_clock_mhz, f"{v.name} J{v.job_id}"))
    if not window:
        return Ruling("throttle", True, "no GPU throttle record (CPU runs): nothing throttled")
    share, limit = faults / window, bid.tender.rules.max_throttled_share
    text = (
        f"{faults} of {window} steady slices slowed by a thermal, hardware or power-brake "
        f"slowdown ({share:.1%}, limit {limit:.1%}); at the power limit in {limited} "
        f"({limited / window:.1%}: the operating point, not a fault)"
    )
    ok = share <= limit
    # the buyer's floors, off unless the tender sets them
    most = bid.tender.rules.max_power_limit_share
    if most is not None and limited / window > most:
        ok, text = False, f"{text}; more than the tender's {most:.1%} at the power limit"
    least = bid.tender.rules.min_sm_clock_mhz
    slow = sorted(c for c in clocks if c[0] < least) if least is not None else []
    if slow:
        ok = False
        text += f"; median SM clock under the tender's {least:,.0f} MHz: " + ", ".join(
            f"{name} {mhz:,.0f}" for mhz, name in slow[:3]
        )
    return Ruling("throttle", ok, text)


def busy(bid: Bid) -> Ruling:
    """No run measured beside other work: a run whose steady window lost a quarter or more
    of its CPUs to other processes (its ``busy`` flag) measured the machine and someone
    else's load, not the machine (docs/busy-and-acceptance.md)."""
    measured = [(v, v.diagnostics()) for v in bid.views if v.rate() is not None]
    found = [(v, d, d.contention) for v, d in measured]
    shares = [c.others for _, _, c in found if c is not None]
    flagged = [(v, c) for v, d, c in found if "busy" in d.flags]
    unread = sum(c is None for _, _, c in found)
    worst = f"{max(shares):.0%}" if shares else "-"
    if flagged:
        named = [f"{v.name} J{v.job_id}" + (f" {c.others:.0%}" if c else "") for v, c in flagged]
        return Ruling(
            "busy",
            False,
            f"{len(flagged)} of {len(measured)} run(s) measured on a busy machine (other "
            f"processes took a quarter or more of their CPUs, up to {worst}): {_some(named)}; "
            "not a measurement of the machine: re-run them on a quiet machine",
        )
    if not shares:
        return Ruling(
            "busy",
            True,
            f"not judged: no contention record in the {len(measured)} run(s) (made before "
            "milarun kept one, or steady windows too short)",
        )
    note = f"; {unread} run(s) without a contention record" if unread else ""
    return Ruling(
        "busy",
        True,
        f"no run measured on a busy machine (others took at most {worst} of a run's CPUs; "
        f"busy from a quarter){note}",
    )


def consistency(bid: Bid) -> Ruling:
    found = [
        why
        for v, path in zip(bid.views, bid.loaded.paths, strict=True)
        if (why := result_problem(v, path))
    ]
    if found:
        return Ruling("consistency", False, f"{len(found)} result(s): {_some(found)}")
    return Ruling(
        "consistency", True, f"{len(bid.views)} result(s): slices, times and counts agree"
    )


def comparability(bid: Bid) -> Ruling:
    variants = sorted(t for t, e in bid.summary.items() if e.get("variant_of"))
    notes = []
    synthetic = sorted({v.name for v in bid.views if v.synthetic_data})
    if synthetic:
        notes.append(f"synthetic data: {_some(synthetic)}")
    nocache = sorted(t for t, e in bid.summary.items() if e.get("nocache") is False)
    if nocache:
        notes.append(f"page cache used (no nocache): {_some(nocache)}")
    text = "; ".join(notes) or "no note"
    if variants:
        return Ruling(
            "comparability", False, f"runs with other settings: {_some(variants)}; {text}"
        )
    return Ruling("comparability", True, f"every test's runs alike; {text}")
