"""The buyer's rules of one call for tenders: ``tender.json`` (``milarun tender init``).

The file is self-contained: besides the SHA-256 of the profile and weights files as shipped,
it holds each selected job's arguments and the weights, so that ``milarun verify`` checks a
bid without trusting the bid's copies and without the buyer's own install having to match.
Every field is explained in the file itself (``about``) and in the README.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milarun import results
from milarun.errors import TenderError
from milarun.machine import provenance, sysinfo
from milarun.report import build
from milarun.report.weights import WEIGHTS_DIR, load_weights
from milarun.run.profile import load_profile

KIND = "milarun-tender"
FORMAT = 1
DEFAULT_MIN_STEADY_SLICES = 10
DEFAULT_MAX_THROTTLED = 0.05
MAX_SM_CLOCK_MHZ = 10_000
MAX_REPEAT = 10_000
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHALLENGE = re.compile(r"[0-9a-f]{32}")
# Optional limits on the inference tests' figures (milarun.tender.latency_rules): key, the
# `tender init` option, the largest value it takes; absent or null: no limit.
LATENCY_LIMITS = (
    ("max_ttft_p99_ms", "--max-ttft-p99", 3_600_000.0),
    ("max_tpot_p99_ms", "--max-tpot-p99", 3_600_000.0),
    ("min_goodput_percent", "--min-goodput", 100.0),
)
# the options a tender written before them lacks: absent reads as false
OPTIONAL_SWITCHES = (
    "unknown_device_fails",
    "require_challenge",
    "require_doctor",
    "require_node_power",
)

ABOUT = {
    "milarun_version": "the milarun version every result must record",
    "milarun_release": "the release that made this tender (version, git commit where it ran "
    "from a checkout): its FLOPs table and bounds are the ones verify must apply",
    "profile": "the profile as shipped: name, SHA-256 of its file, the selected tests and "
    "each job's experiment, partition and argv (the arguments a run must have)",
    "weights": "the weights as shipped: name, SHA-256 of its file, and the values scored with",
    "repeat": "runs of every test required on every device (every GPU of the machine)",
    "require_cgroups": "every instance must run in its own student cgroup (cpuset and memory)",
    "allow_overrides": "whether a run may carry arguments other than the profile's (`--`)",
    "max_failure_rate": "failed runs / all runs at most this",
    "min_steady_slices": "slices in each run's steady window at least this",
    "max_throttled_share": "steady slices a thermal, hardware or power-brake slowdown slowed / "
    "all steady slices at most this (a GPU at its power limit is at its operating point)",
    "min_sm_clock_mhz": "every GPU run's median SM clock over its steady window at least this "
    "(null: no floor)",
    "max_power_limit_share": "steady slices at the GPU's power limit / all steady slices at "
    "most this (null: no limit)",
    "challenge": "a random value of this tender: `milarun jobs --tender FILE` records it in "
    "each run's manifest, proving the run was made for this tender, after it was issued",
    "require_challenge": "every run must carry this tender's challenge and start after the "
    "tender was created (runs made for this tender)",
    "require_doctor": "every device a result ran on needs a PASS `doctor --active` record in "
    "its run folder, made from an hour before the run started to its end",
    "unknown_device_fails": "a result on a device with no row in milarun's datasheet FAILs "
    "(otherwise its rates are bounded by no peak, and verify says so)",
    "require_node_power": "every scored run carries the whole node's energy from its BMC "
    "(node perf/W), and the ranking's energy cost and TCO are the node's",
    "max_ttft_p99_ms": "every inference run's time to first token at p99 (ms) at most this "
    "(null: no limit; MLPerf's server limit for Llama-3.1-8B is 2000)",
    "max_tpot_p99_ms": "every inference run's time per output token at p99 (ms) at most this "
    "(null: no limit; MLPerf's: 100)",
    "min_goodput_percent": "every llm-serve run's share of requests within its latency limits "
    "at least this (null: no floor)",
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

    def number(self, key: str) -> float:
        return float(self.data[key])

    def floor(self, key: str) -> float | None:
        """An optional rule's number (a tender written before it had none)."""
        value = self.data.get(key)
        return None if value is None else float(value)

    @property
    def repeat(self) -> int:
        return int(self.data["repeat"])

    @property
    def require_cgroups(self) -> bool:
        return bool(self.data["require_cgroups"])

    @property
    def allow_overrides(self) -> bool:
        return bool(self.data["allow_overrides"])

    def switch(self, key: str) -> bool:
        """An optional rule's switch (OPTIONAL_SWITCHES; absent: off)."""
        return bool(self.data.get(key, False))

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

    @property
    def margin(self) -> float:
        return float(self.data["acceptance"]["margin"])

    @property
    def risk(self) -> float:
        return float(self.data["acceptance"]["risk"])


def make_tender(
    profile: str,
    weights: str | None,
    *,
    repeat: int,
    names: list[str] | None = None,
    tags: list[str] | None = None,
    require_cgroups: bool = False,
    allow_overrides: bool = False,
    max_failure_rate: float = build.FAILURE_RATE_LIMIT,
    min_steady_slices: int = DEFAULT_MIN_STEADY_SLICES,
    max_throttled_share: float = DEFAULT_MAX_THROTTLED,
    min_sm_clock_mhz: float | None = None,
    max_power_limit_share: float | None = None,
    margin: float = 0.95,
    risk: float = 0.05,
    require_challenge: bool = False,
    require_doctor: bool = False,
    unknown_device_fails: bool = False,
    require_node_power: bool = False,
    latency: dict[str, float | None] | None = None,
) -> dict[str, Any]:
    """The tender's JSON object; TenderError naming the option for a value out of range.
    ``latency``: the inference limits of LATENCY_LIMITS the buyer sets."""
    _check_numbers(repeat, max_failure_rate, min_steady_slices, max_throttled_share, margin, risk)
    limits = {key: (latency or {}).get(key) for key, _, _ in LATENCY_LIMITS}
    for key, option, high in LATENCY_LIMITS:
        value = limits[key]
        if value is not None and not (math.isfinite(value) and 0 < value <= high):
            raise TenderError(f"{option} {value}: must be a number above 0, at most {high:g}")
    for option, value, high in (
        ("--min-sm-clock", min_sm_clock_mhz, MAX_SM_CLOCK_MHZ),
        ("--max-power-limit", max_power_limit_share, 1),
    ):
        if value is not None and not (math.isfinite(value) and 0 <= value <= high):
            raise TenderError(f"{option} {value}: must be a number from 0 to {high:g}")
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
        "repeat": repeat,
        "require_cgroups": require_cgroups,
        "allow_overrides": allow_overrides,
        "max_failure_rate": max_failure_rate,
        "min_steady_slices": min_steady_slices,
        "max_throttled_share": max_throttled_share,
        "min_sm_clock_mhz": min_sm_clock_mhz,
        "max_power_limit_share": max_power_limit_share,
        "acceptance": {"margin": margin, "risk": risk},
        "challenge": secrets.token_hex(16),
        "require_challenge": require_challenge,
        "require_doctor": require_doctor,
        "unknown_device_fails": unknown_device_fails,
        "require_node_power": require_node_power,
        **limits,
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


def _check_numbers(
    repeat: int, failure: float, slices: int, throttled: float, margin: float, risk: float
) -> None:
    checks = [
        ("--repeat", repeat, 1 <= repeat <= MAX_REPEAT, f"a whole number from 1 to {MAX_REPEAT}"),
        ("--max-failure-rate", failure, 0 <= failure <= 1, "a share from 0 to 1"),
        ("--min-steady-slices", slices, 3 <= slices <= 10_000, "a whole number from 3 to 10000"),
        ("--max-throttled", throttled, 0 <= throttled <= 1, "a share from 0 to 1"),
        ("--margin", margin, 0 < margin <= 10, "a factor above 0, e.g. 0.95"),
        ("--risk", risk, 0 < risk < 0.5, "a probability above 0 and below 0.5, e.g. 0.05"),
    ]
    for option, value, ok, what in checks:
        if not ok or (isinstance(value, float) and not math.isfinite(value)):
            raise TenderError(f"{option} {value}: must be {what}")


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
    numbers: list[tuple[str, Any, float, float]] = [
        ("repeat", data.get("repeat"), 1, MAX_REPEAT),
        ("max_failure_rate", data.get("max_failure_rate"), 0, 1),
        ("min_steady_slices", data.get("min_steady_slices"), 0, 10_000),
        ("max_throttled_share", data.get("max_throttled_share"), 0, 1),
    ]
    acceptance = data.get("acceptance")
    if not isinstance(acceptance, dict):
        return "'acceptance' is not an object with margin and risk"
    numbers += [
        ("acceptance.margin", acceptance.get("margin"), 1e-9, 10),
        ("acceptance.risk", acceptance.get("risk"), 1e-9, 0.4999),
    ]
    floors: list[tuple[str, float]] = [
        ("min_sm_clock_mhz", MAX_SM_CLOCK_MHZ),
        ("max_power_limit_share", 1.0),
        *((key, high) for key, _, high in LATENCY_LIMITS),
    ]
    for name, most in floors:
        if data.get(name) is not None:  # a floor the buyer set; absent or null: none
            numbers.append((name, data[name], 0, most))
    for key, value, low, high in numbers:
        if not _is_number(value, low, high):
            return f"'{key}' {str(value)[:40]} is not a number from {low:g} to {high:g}"
    if not isinstance(data["repeat"], int):
        return "'repeat' is not a whole number"
    for key in ("require_cgroups", "allow_overrides"):
        if not isinstance(data.get(key), bool):
            return f"'{key}' is not true/false"
    for key in OPTIONAL_SWITCHES:
        if not isinstance(data.get(key, False), bool):
            return f"'{key}' is not true/false"
    challenge = data.get("challenge")
    if challenge is not None and not (
        isinstance(challenge, str) and _CHALLENGE.fullmatch(challenge)
    ):
        return "'challenge' is not 32 hex digits"
    if data.get("require_challenge") and challenge is None:
        return "'require_challenge' is true but the tender has no 'challenge'"
    return None
