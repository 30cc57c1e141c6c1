"""The ``evidence`` rule of ``milarun verify``: each result's rate and count against every
record the package holds beside it that was written apart from them.

A result file alone proves nothing: its rates, its count and its times can be edited
together, and the MANIFEST's hashes made anew (the ``consistency`` rule only sees a result
that contradicts itself). The same run also wrote, as it measured or from other
measurements: its console log (milarun.tender.evidence.console_log), its GPU monitor's samples and
the energy record made of them, the FLOPs of one step and the device's datasheet and
measured peaks (milarun.tender.evidence.energy_and_peaks), and the supervisor's run manifest (when
the run started and ended, which result files it recorded). A figure that disagrees with
any of them beyond the way it is written FAILs, naming the file, the field and both values.
What this proves and what it cannot: docs/tender-evidence.md.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from milarun import results
from milarun.errors import InputError
from milarun.results import manifest
from milarun.results.folder import Loaded
from milarun.results.read import ResultView
from milarun.results.records import RateRecord
from milarun.results.run_manifest import RunManifest, RunSpan
from milarun.tender import bounds, checks, package
from milarun.tender.evidence import energy_and_peaks
from milarun.tender.evidence.console_log import log_problems

# A run's clock may be stepped while it runs (NTP); a minute covers any step of a healthy
# machine, while a result spliced in from another run is hours or days away.
CLOCK = 60.0
SHOWN = 3


@dataclasses.dataclass
class Applied:
    """Which bounds the rule applied to how many results, and why not to the others."""

    flops: int = 0  # FLOPs per example recomputed by milarun
    peaks: int = 0  # a datasheet row known for the device the system record names
    energy: int = 0  # FLOPs per joule and the busy device's power bounded
    on_bid: int = 0  # of ``peaks``: bounding the bid's own FLOPs (milarun has no figure)
    doctor: int = 0  # a PASS doctor record's GEMM peak of the device in the run folder
    # why a bound was not applied, and to how many results
    unbounded: Counter[str] = dataclasses.field(default_factory=Counter)

    def text(self, checked: int) -> str:
        on_bid = f" ({self.on_bid} on the bid's own FLOPs)" if self.on_bid else ""
        applied = (
            f"FLOPs per example recomputed by milarun for {self.flops}, the datasheet peak "
            f"applied to {self.peaks}{on_bid}, energy bounds (FLOPs per joule, a busy GPU's "
            f"power and utilisation) to {self.energy}, the doctor's measured GEMM peak to "
            f"{self.doctor}"
        )
        if not self.unbounded:
            return applied
        why = "; ".join(f"{w} ({n})" for w, n in sorted(self.unbounded.items())[:4])
        return f"{applied}; not applied: {why}"


def evidence(bid: checks.Bid) -> checks.Ruling:
    """The rule: every successful result of the tender's tests against its evidence."""
    run = bid.root / package.RUN
    applied = Applied()
    found, measured, metered = problems(run, bid.loaded, bid.manifests, applied=applied)
    if bid.tender.rules.unknown_device_fails:
        found += [f"{w}: the tender bounds every device" for w in applied.unbounded if
                  w.startswith(NO_PEAK)]  # fmt: skip
    if found:
        more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        return checks.Ruling(
            "evidence",
            False,
            f"{len(found)} disagreement(s) in {measured} result(s): "
            + "; ".join(found[:SHOWN])
            + more,
        )
    return checks.Ruling(
        "evidence",
        True,
        f"{measured} result(s): each rate and count agrees with its log and its run manifest; "
        f"{metered} with their GPU monitor's energy; {applied.text(measured)}",
    )


NO_PEAK = "no peak applied"


def problems(
    run: Path,
    loaded: Loaded,
    manifests: Sequence[tuple[Path, RunManifest]],
    *,
    applied: Applied | None = None,
) -> tuple[list[str], int, int]:
    """Every disagreement of the successful results below the run folder ``run`` (a failed
    run has no rate to forge), how many results were checked, and how many of them had an
    energy measured from GPU monitor samples to check against (``applied``: filled with the
    bounds applied)."""
    applied = applied if applied is not None else Applied()
    spans = [(path.parent, run.span) for path, run in manifests]
    machines = [(path.parent, run.span, manifest.kept_machine(path)) for path, run in manifests]
    doctors: dict[Path, energy_and_peaks.Measured] = {}
    found: list[str] = []
    checked = metered = 0
    for view, path in zip(loaded.results, loaded.paths, strict=True):
        if view.rate() is None:
            continue
        checked += 1
        folder = Path(path).parent
        if folder not in doctors:
            doctors[folder] = energy_and_peaks.doctor_peaks(energy_and_peaks.read_doctors(folder))
        machine = next(
            (m for f, s, m in machines if f == folder and Path(path).name in s.results), None
        )
        disagree, energy = result_problems(
            Path(path),
            run,
            spans,
            doctors[folder],
            view,
            machine=machine.data if machine is not None else None,
            applied=applied,
        )
        found += disagree
        metered += energy
    return found, checked, metered


def result_problems(
    path: Path,
    run: Path,
    spans: list[tuple[Path, RunSpan]],
    measured: energy_and_peaks.Measured,
    loaded: ResultView | None = None,
    *,
    machine: Mapping[str, Any] | None = None,
    applied: Applied | None = None,
) -> tuple[list[str], bool]:
    """One result's disagreements with its log, its energy, its FLOPs and its manifest, and
    whether it had a measured energy. ``loaded``: the result as a folder's loader read it,
    its monitor samples dropped: read again from its file where a GPU's samples matter."""
    file = path.relative_to(run).as_posix()
    view = loaded
    if view is None or view.device.startswith("cuda"):
        try:
            view = ResultView.from_dict(results.load_result(path))
        except InputError as err:
            return [f"{file}: unreadable ({str(err)[:200]})"], False
    records = {
        key: record
        for key, value in view.timings.items()
        if (record := RateRecord.from_dict(value)) is not None
    }
    applied = applied if applied is not None else Applied()
    device, found = bounds.device_of(view, file, machine)
    expected, not_recomputed, wrong = bounds.flops_problem(view, file)
    bounded, too_much = bounds.energy_problems(view, file, expected, device)
    found += wrong + log_problems(view, records, run, path)
    found += energy_and_peaks.energy_problems(view, records, file) + too_much
    found += energy_and_peaks.flops_problems(
        view,
        records,
        file,
        measured,
        row=device.row,
        milarun_flops=expected.value if expected else None,
        precision=expected.precision if expected else None,
    )
    found += _time_problems(view, records, path, file, spans)
    applied.flops += expected is not None
    applied.peaks += device.row is not None
    applied.on_bid += device.row is not None and expected is None
    applied.doctor += bool(measured.get(view.device))
    applied.energy += bounded
    if not_recomputed:
        applied.unbounded[f"FLOPs not recomputed: {not_recomputed}"] += 1
    if device.why:
        applied.unbounded[f"{NO_PEAK}: {device.why}"] += 1
    if device.pci_why and not device.why:
        applied.unbounded[f"device id check: {device.pci_why}"] += 1
    energy = view.energy
    return found, energy is not None and results.is_finite(energy.joules)


def _utc(when: float) -> str:
    return _dt.datetime.fromtimestamp(when, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _time_problems(
    view: ResultView,
    records: dict[str, RateRecord],
    path: Path,
    file: str,
    spans: list[tuple[Path, RunSpan]],
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
