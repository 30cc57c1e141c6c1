"""``milarun package``: a results folder, as it is, in a bid package a buyer can verify.

Layout inside the package (every file hashed in the MANIFEST):

- ``run/...``: every regular file of the results folder (results, logs, run manifests, the
  machine records ``jobs`` kept at the start of each run: ``.milarun-run.<stamp>.sysinfo``
  and ``.profile``, a ``doctor-active.json`` where there is one, the report pages);
- ``profile.json``, ``weights.json``: the profile as run (the copy ``jobs`` kept, else the
  shipped file of that name, said in ``bid.json``) and the suite's shipped weights;
- ``bid.json``: what was packed, the runs, whether one was cut short, what is missing;
- ``reproducibility.json``: the packing install and machine (milarun version, git commit,
  uv.lock hash, installed packages, container image, driver, CUDA, cuDNN, NCCL,
  InfiniBand, VBIOS per GPU);
- ``tender.json``, ``declared.json``: the tender answered and the figures declared, when given.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milarun import results
from milarun.errors import InputError, PackageRefused, TenderError
from milarun.machine import provenance, sysinfo
from milarun.report.weights import WEIGHTS_DIR
from milarun.results import digest, manifest
from milarun.run.profile import PROFILE_DIR
from milarun.tender import archive, rules

RUN = "run"
BID, REPRO, PROFILE, WEIGHTS = "bid.json", "reproducibility.json", "profile.json", "weights.json"
TENDER, DECLARED = "tender.json", "declared.json"
BID_KIND, BID_FORMAT = "milarun-bid", 1  # bid.json's: a newer milarun may pack another format
# the lock is a run's; a digest is no measurement (the buyer's verify reads every file)
SKIPPED_NAMES = (".milarun.lock", digest.NAME)


@dataclass
class Packed:
    """What ``package`` did, for the command to print."""

    out: Path
    files: int
    bytes_in: int
    results: int
    notes: list[str] = field(default_factory=list)


def _folder_files(folder: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """Every regular file below ``folder`` (package name, path), sorted; and what was left
    out (links, sockets: never followed)."""
    found, left = [], []
    for dirpath, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = Path(dirpath) / name
            rel = path.relative_to(folder).as_posix()
            if name in SKIPPED_NAMES or (name.startswith(".") and name.endswith(".tmp")):
                continue
            if not stat.S_ISREG(os.lstat(path).st_mode):
                left.append(rel)
                continue
            found.append((f"{RUN}/{rel}", path))
    return found, left


def _runs(folder: Path) -> list[dict[str, Any]]:
    """Each run manifest of the folder: its profile, status and kept records."""
    runs = []
    for path in sorted(folder.rglob(f"{manifest.PREFIX}*{manifest.SUFFIX}")):
        try:
            data = results.read_json(path)
        except InputError:  # a damaged manifest: the verification reports it
            continue
        stem = path.name.removesuffix(manifest.SUFFIX)
        runs.append(
            {
                "manifest": path.relative_to(folder).as_posix(),
                "profile": data.get("profile") if isinstance(data, dict) else None,
                "status": data.get("status") if isinstance(data, dict) else None,
                "sysinfo": path.with_name(f"{stem}.sysinfo").is_file(),
                "profile_kept": path.with_name(f"{stem}.profile").is_file(),
            }
        )
    return runs


def _profile_as_run(folder: Path, runs: list[dict[str, Any]], notes: list[str]) -> bytes | None:
    kept = sorted(folder.rglob(f"{manifest.PREFIX}*.profile"))
    texts = {p.read_bytes() for p in kept}
    if len(texts) > 1:
        notes.append(f"the runs used {len(texts)} different profiles: profile.json is the first")
    if kept:
        return kept[0].read_bytes()
    names = sorted({str(r["profile"]) for r in runs if r["profile"]})
    if not names:
        notes.append("no run manifest names a profile: no profile.json")
        return None
    path = PROFILE_DIR / f"{names[0]}.json"
    if "/" in names[0] or not path.is_file():
        notes.append(f"profile {names[0]!r} of the runs is not shipped here: no profile.json")
        return None
    notes.append(f"the runs kept no copy of their profile: profile.json is the shipped {path.name}")
    return path.read_bytes()


def _weights(profile_bytes: bytes | None) -> bytes | None:
    if profile_bytes is None:
        return None
    for name in WEIGHTS_DIR.glob("*.json"):  # the suite's own, by content
        prof = PROFILE_DIR / name.name
        if prof.is_file() and prof.read_bytes() == profile_bytes:
            return name.read_bytes()
    return None


def make_package(
    folder: Path, out: Path, tender: Path | None = None, declared: Path | None = None
) -> Packed:
    """Pack ``folder`` into ``out``; TenderError when it holds no result or a file given
    cannot be used."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TenderError(f"{folder}: not a results folder")
    files, left = _folder_files(folder)
    count = sum(results.parse_filename(Path(n).name) is not None for n, _ in files)
    if not count:
        raise TenderError(f"{folder}: no milarun result in it; run `milarun jobs` first")
    notes = [f"left out (not a regular file): {n}" for n in left[:20]]
    runs = _runs(folder)
    if not runs:
        notes.append("no run manifest: these results were not made by `milarun jobs`")
    if runs and not all(r["sysinfo"] for r in runs):
        notes.append("a run kept no machine record (sysinfo): made before milarun kept one?")
    if not any(Path(n).name.startswith(results.DOCTOR_RECORD) for n, _ in files):
        notes.append("no doctor record (doctor-active.json: `jobs --doctor`) in the folder")
    cuts = manifest.cut_short(folder)
    notes += [f"{cut.describe(folder)}: no result for {cut.missing()}" for cut in cuts]
    extra: list[tuple[str, Path | bytes]] = []
    profile_bytes = _profile_as_run(folder, runs, notes)
    if profile_bytes is not None:
        extra.append((PROFILE, profile_bytes))
        weights = _weights(profile_bytes)
        if weights is not None:
            extra.append((WEIGHTS, weights))
        else:
            notes.append("the profile is not a shipped one: no weights.json")
    tender_sha = None
    if tender is not None:
        loaded = rules.load_tender(tender)
        tender_sha = loaded.sha256
        extra.append((TENDER, Path(tender)))
        if profile_bytes is not None and rules.sha256_bytes(profile_bytes) != loaded.profile_sha256:
            notes.append("the profile as run differs from the tender's: verify will FAIL it")
    if declared is not None:
        read_declared(declared)  # refused here, not at the buyer's
        extra.append((DECLARED, Path(declared)))
    bid = {
        "kind": BID_KIND,
        "format": BID_FORMAT,
        "packed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "milarun_version": sysinfo.milarun_version(),
        "source": folder.resolve().name,  # its name: no path of the vendor's machine
        "results": count,
        "runs": runs,
        "cut_short": [f"{c.describe(folder)}: no result for {c.missing()}" for c in cuts],
        "tender_sha256": tender_sha,
        "notes": notes,
    }
    repro = {"system": sysinfo.system_record(), "provenance": provenance.record()}
    members: list[tuple[str, Path | bytes]] = [
        (BID, json.dumps(bid, indent=2).encode()),
        (REPRO, json.dumps(repro, indent=2, default=str).encode()),
        *extra,
        *files,
    ]
    written, size = archive.write_package(Path(out), members)
    return Packed(Path(out), written, size, count, notes)


def checked_bid(bid: dict[str, Any], package: Path) -> dict[str, Any]:
    """bid.json as read from ``package`` (``{}``: none, or not an object); PackageRefused
    when it is a milarun bid of a format this milarun does not read."""
    found = bid.get("format")
    if bid.get("kind") == BID_KIND and found != BID_FORMAT:
        raise PackageRefused(
            f"{package}: refused: its {BID} is of format {str(found)[:40]} (this milarun reads "
            f"format {BID_FORMAT}): verify it with the milarun version that packed it (its "
            f"{BID} says which)"
        )
    return bid


MAX_DECLARED_TESTS = 10_000


def read_declared(path: Path) -> dict[str, Any]:
    """``{"tests": {test: rate > 0}, "score": score > 0 (optional)}``, checked."""
    data = results.read_json(path, TenderError)
    tests = data.get("tests") if isinstance(data, dict) else None
    if not isinstance(tests, dict) or len(tests) > MAX_DECLARED_TESTS:
        raise TenderError(f'{path}: expected {{"tests": {{test: rate}}, "score": score}}')
    for test, rate in tests.items():
        if not (results.is_finite(rate) and 0 < rate <= results.MAX_RATE):
            raise TenderError(f"{path}: test {str(test)[:60]!r}: rate {rate!r} is not a rate > 0")
    score = data.get("score")
    if score is not None and not (results.is_finite(score) and score > 0):
        raise TenderError(f"{path}: 'score' {score!r} is not a number > 0")
    return {"tests": {str(t): float(r) for t, r in tests.items()}, "score": score}
