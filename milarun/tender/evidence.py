"""The ``evidence`` rule of ``milarun verify``: each result's rate and count against every
record the package holds beside it that was written apart from them.

A result file alone proves nothing: its rates, its count and its times can be edited
together, and the MANIFEST's hashes made anew (the ``consistency`` rule only sees a result
that contradicts itself). The same run also wrote, as it measured or from other
measurements: its console log (milarun.tender.evidence_log), its GPU monitor's samples and
the energy record made of them, the FLOPs of one step and the device's datasheet and
measured peaks (milarun.tender.evidence_figures), and the supervisor's run manifest (when
the run started and ended, which result files it recorded). A figure that disagrees with
any of them beyond the way it is written FAILs, naming the file, the field and both values.
What this proves and what it cannot: docs/tender-evidence.md.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from milarun import results
from milarun.errors import InputError
from milarun.results import manifest
from milarun.results.folder import Loaded
from milarun.results.parts import RateRecordRead
from milarun.results.read import ResultView
from milarun.tender import checks, evidence_figures, package
from milarun.tender.evidence_log import log_problems

# A run's clock may be stepped while it runs (NTP); a minute covers any step of a healthy
# machine, while a result spliced in from another run is hours or days away.
CLOCK = 60.0
SHOWN = 3


def evidence(bid: checks.Bid) -> checks.Check:
    """The rule: every successful result of the tender's tests against its evidence."""
    run = bid.root / package.RUN
    found, measured, metered = problems(run, bid.loaded, bid.manifests)
    if found:
        more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        return checks.Check(
            "evidence",
            False,
            f"{len(found)} disagreement(s) in {measured} result(s): "
            + "; ".join(found[:SHOWN])
            + more,
        )
    return checks.Check(
        "evidence",
        True,
        f"{measured} result(s): each rate and count agrees with its log, its run manifest and "
        f"its FLOPs and peaks; {metered} of them also with their GPU monitor's energy",
    )


def problems(
    run: Path, loaded: Loaded, manifests: Sequence[tuple[Path, dict[str, Any]]]
) -> tuple[list[str], int, int]:
    """Every disagreement of the successful results below the run folder ``run`` (a failed
    run has no rate to forge), how many results were checked, and how many of them had an
    energy measured from GPU monitor samples to check against."""
    spans = [(path.parent, manifest.run_span(data)) for path, data in manifests]
    doctors: dict[Path, evidence_figures.Measured] = {}
    found: list[str] = []
    checked = metered = 0
    for data, path in zip(loaded.results, loaded.paths, strict=True):
        if ResultView.from_dict(data).rate() is None:
            continue
        checked += 1
        folder = Path(path).parent
        if folder not in doctors:
            doctors[folder] = evidence_figures.doctor_peaks(evidence_figures.read_doctors(folder))
        disagree, energy = result_problems(Path(path), run, spans, doctors[folder], data)
        found += disagree
        metered += energy
    return found, checked, metered


def result_problems(
    path: Path,
    run: Path,
    spans: list[tuple[Path, manifest.RunSpan]],
    measured: evidence_figures.Measured,
    loaded: Mapping[str, Any] | None = None,
) -> tuple[list[str], bool]:
    """One result's disagreements with its log, its energy, its FLOPs and its manifest, and
    whether it had a measured energy. ``loaded``: the result as a folder's loader read it,
    its monitor samples dropped: read again from its file where a GPU's samples matter."""
    file = path.relative_to(run).as_posix()
    view = ResultView.from_dict(loaded) if loaded is not None else None
    if view is None or view.device.startswith("cuda"):
        try:
            view = ResultView.from_dict(results.load_result(path))
        except InputError as err:
            return [f"{file}: unreadable ({str(err)[:200]})"], False
    records = {
        key: record
        for key, value in view.timings.items()
        if (record := RateRecordRead.from_dict(value)) is not None
    }
    found = (
        log_problems(view, records, run, path)
        + evidence_figures.energy_problems(view, records, file)
        + evidence_figures.flops_problems(view, records, file, measured)
        + _time_problems(view, records, path, file, spans)
    )
    energy = view.energy
    return found, energy is not None and results.is_finite(energy.joules)


def _utc(when: float) -> str:
    return _dt.datetime.fromtimestamp(when, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _time_problems(
    view: ResultView,
    records: dict[str, RateRecordRead],
    path: Path,
    file: str,
    spans: list[tuple[Path, manifest.RunSpan]],
) -> list[str]:
    """The result's times within the span of the run whose manifest recorded it."""
    mine = [s for folder, s in spans if folder == path.parent and path.name in s.results]
    if not mine:
        return [f"{file}: no run manifest of its folder records it (`jobs` records each result)"]
    span = mine[-1]
    times: list[tuple[str, Any]] = [("finished_at", view.finished_at)]
    for key, record in records.items():
        if key.rpartition("_")[2].isdigit():
            continue  # a rank's, on its own node's clock (rank 0's is the result's own)
        times.append((f"timings.{key}.start", record.start))
        if record.slice_ends:
            times.append((f"timings.{key}.slice_ends[-1]", record.slice_ends[-1]))
    end = span.finished_at
    for field, when in times:
        if not results.is_finite(when) or not 0 <= when <= manifest.MAX_TIME:
            continue
        if when < span.started_at - CLOCK or (end is not None and when > end + CLOCK):
            till = _utc(end) if end is not None else "not finished"
            return [
                f"{file}: {field} {_utc(when)} but the run manifest that records it ran from "
                f"{_utc(span.started_at)} to {till}"
            ]
    return []
