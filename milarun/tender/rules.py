"""The buyer's rules of one call for tenders: ``tender.json`` (``milarun tender init``).

The file is self-contained: besides the SHA-256 of the profile and weights files as shipped,
it holds each selected job's arguments and the weights, so that ``milarun verify`` checks a
bid without trusting the bid's copies and without the buyer's own install having to match.
Every field is explained in the file itself (``about``) and in the README.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milarun import results
from milarun.errors import TenderError
from milarun.machine import provenance, sysinfo
from milarun.report.weights import WEIGHTS_DIR, load_weights
from milarun.results import tender_rules
from milarun.results.tender_rules import TenderRules
from milarun.run.profile import load_profile

KIND = "milarun-tender"
FORMAT = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHALLENGE = re.compile(r"[0-9a-f]{32}")

ABOUT = {
    "milarun_version": "the milarun version every result must record",
    "milarun_release": "the release that made this tender (version, git commit where it ran "
    "from a checkout): its FLOPs table and bounds are the ones verify must apply",
    "profile": "the profile as shipped: name, SHA-256 of its file, the selected tests and "
    "each job's experiment, partition and argv (the arguments a run must have)",
    "weights": "the weights as shipped: name, SHA-256 of its file, and the values scored with",
    **tender_rules.about(),
    "challenge": "a random value of this tender: `milarun jobs --tender FILE` records it in "
    "each run's manifest, proving the run was made for this tender, after it was issued",
    "acceptance": "declared figures: ACCEPT when P(true < margin x declared) < risk, REJECT "
    "when P(true >= margin x declared) < risk: read off the (1 - 2 x risk) interval of the "
    "mean over runs (Student t; widened to the bootstrap-t from 10 runs), printed by verify",
}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class JobRule:
    """One selected job as the tender fixes it."""

    experiment: str
    partition: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Tender:
    """A loaded, checked tender."""

    data: dict[str, Any]
    sha256: str

    @property
    def version(self) -> str:
        return str(self.data["milarun_version"])

    @property
    def release(self) -> tuple[str | None, bool | None]:
        """The git commit of the release that made the tender and whether it was modified
        (None, None: a tender made before it named them, or from an installed wheel)."""
        named = self.data.get("milarun_release")
        named = named if isinstance(named, dict) else {}
        commit, modified = named.get("commit"), named.get("modified")
        return (
            commit[:40] if isinstance(commit, str) else None,
            modified if isinstance(modified, bool) else None,
        )

    @property
    def profile_name(self) -> str:
        return str(self.data["profile"]["name"])

    @property
    def profile_sha256(self) -> str:
        return str(self.data["profile"]["sha256"])

    @property
    def weights_sha256(self) -> str:
        return str(self.data["weights"]["sha256"])

    @property
    def weights(self) -> dict[str, float]:
        return {str(t): float(w) for t, w in self.data["weights"]["values"].items()}

    @property
    def weights_name(self) -> str:
        return str(self.data["weights"]["name"])

    @property
    def jobs(self) -> dict[str, JobRule]:
        return {
            name: JobRule(j["experiment"], j["partition"], tuple(j["argv"]))
            for name, j in self.data["profile"]["jobs"].items()
        }

    @property
    def rules(self) -> TenderRules:
        """Its thresholds and switches (a rule a tender written before it lacks: off)."""
        return TenderRules.from_dict(self.data)

    @property
    def challenge(self) -> str | None:
        found = self.data.get("challenge")
        return found if isinstance(found, str) else None

    @property
    def created_at(self) -> float | None:
        """When the tender was written (POSIX seconds), None where unreadable."""
        try:
            return _dt.datetime.fromisoformat(str(self.data.get("created_at"))).timestamp()
        except ValueError:
            return None


def make_tender(
    profile: str,
    weights: str | None,
    rules: TenderRules,
    *,
    names: list[str] | None = None,
    tags: list[str] | None = None,
) -> dict[str, Any]:
    """The tender's JSON object; TenderError naming the option for a value out of range."""
    rules.checked()
    prof = load_profile(profile)
    selected = prof.select(names or [], tags or [])
    if weights is None and not (WEIGHTS_DIR / f"{prof.name}.json").is_file():
        raise TenderError(f"profile {prof.name} has no shipped weights: give --weights FILE")
    weights_path, values = load_weights(weights or prof.name)
    tests = [j.fullname for j in selected]
    if not any(values.get(t, 0) > 0 or values.get(f"{t}.1", 0) > 0 for t in tests):
        raise TenderError(
            f"weights {weights_path}: no weight for any selected test ({', '.join(tests[:3])}"
            f"{', ...' if len(tests) > 3 else ''}): nothing would be scored"
        )
    return {
        "kind": KIND,
        "format": FORMAT,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "milarun_version": sysinfo.milarun_version(),
        "milarun_release": release(),
        "profile": {
            "name": prof.name,
            "sha256": sha256_bytes(prof.path.read_bytes()),
            "tests": tests,
            "jobs": {
                j.fullname: {"experiment": j.experiment, "partition": j.partition, "argv": j.argv()}
                for j in selected
            },
        },
        "weights": {
            "name": Path(weights_path).stem,
            "sha256": sha256_bytes(Path(weights_path).read_bytes()),
            "values": values,
        },
        **rules.to_dict(),
        "challenge": secrets.token_hex(16),
        "about": ABOUT,
    }


def release() -> dict[str, Any]:
    """This milarun's release: its version and, from a source checkout, its git commit
    (None from an installed wheel) and whether its files differ from that commit."""
    found = provenance.git_commit()
    return {
        "version": sysinfo.milarun_version(),
        "commit": found["commit"] if found else None,
        "modified": found["modified"] if found else None,
    }


def write_tender(path: Path, tender: dict[str, Any]) -> Path:
    """Write it, never over an existing file."""
    if path.exists():
        raise TenderError(f"-o {path}: file exists; choose another name")
    try:
        return results.write_atomic(path, tender)
    except FileExistsError:
        raise TenderError(f"-o {path}: file exists; choose another name") from None


def load_tender(path: Path) -> Tender:
    """Read and check a tender file: every field the verification uses, typed."""
    raw = _read_bytes(path)
    data = results.read_json(path, TenderError)
    problem = tender_problem(data)
    if problem:
        raise TenderError(f"{path}: {problem}; make it with `milarun tender init`")
    return Tender(data, sha256_bytes(raw))


def challenge_of(path: Path) -> str:
    """The challenge of the tender at ``path`` (`jobs --tender`); TenderError without one."""
    found = load_tender(path).challenge
    if found is None:
        raise TenderError(
            f"{path}: the tender has no challenge (written before milarun kept one): ask the "
            "buyer for a tender made by this milarun's `tender init`"
        )
    return found


def _read_bytes(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(results.MAX_FILE_BYTES + 1)
    except OSError as err:
        raise TenderError(f"{path}: cannot read ({err.strerror})") from None


def _is_number(value: Any, low: float, high: float) -> bool:
    return results.is_finite(value) and low <= value <= high


def tender_problem(data: Any) -> str | None:
    """Why a parsed tender cannot be used (the field), or None."""
    if not isinstance(data, dict) or data.get("kind") != KIND:
        return "not a milarun tender (no 'kind': 'milarun-tender')"
    if data.get("format") != FORMAT:
        return f"'format' {data.get('format')!r} is not {FORMAT}"
    if not isinstance(data.get("milarun_version"), str):
        return "'milarun_version' is not a string"
    prof, weights = data.get("profile"), data.get("weights")
    if not isinstance(prof, dict) or not isinstance(prof.get("name"), str):
        return "'profile' is not an object with a name"
    if not isinstance(weights, dict) or not isinstance(weights.get("name"), str):
        return "'weights' is not an object with a name"
    for key, block in (("profile", prof), ("weights", weights)):
        if not isinstance(block.get("sha256"), str) or not _SHA256.fullmatch(block["sha256"]):
            return f"'{key}.sha256' is not a SHA-256 (64 hex digits)"
    jobs = prof.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        return "'profile.jobs' is not an object of jobs"
    for name, job in jobs.items():
        if not (
            isinstance(job, dict)
            and isinstance(job.get("experiment"), str)
            and job.get("partition") in ("per-gpu", "gpu-progression", "normal")
            and isinstance(job.get("argv"), list)
            and all(isinstance(a, str) for a in job["argv"])
        ):
            return f"'profile.jobs.{str(name)[:60]}' is not an experiment, partition and argv"
    values = weights.get("values")
    if not isinstance(values, dict) or not all(
        _is_number(w, 0, results.MAX_WEIGHT) for w in values.values()
    ):
        return "'weights.values' is not an object of test -> weight"
    problem = tender_rules.problem(data)
    if problem:
        return problem
    challenge = data.get("challenge")
    if challenge is not None and not (
        isinstance(challenge, str) and _CHALLENGE.fullmatch(challenge)
    ):
        return "'challenge' is not 32 hex digits"
    if data.get("require_challenge") and challenge is None:
        return "'require_challenge' is true but the tender has no 'challenge'"
    return None
