"""Job profiles: load, validate, and expand into concrete jobs (DESIGN section 3)."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milarun import errors, results
from milarun.errors import ProfileError

PROFILE_DIR = Path(__file__).parent.parent / "profiles"
PARTITION_TYPES = ("per-gpu", "gpu-progression", "normal")
JOB_KEYS = {
    "experiment",
    "arguments",
    "partition_scheme",
    "prepare",
    "exec_prefix",
    "max_duration",
    "tags",
}
DEFAULT_MAX_DURATION = 600.0


@dataclass
class Job:
    """One test of a suite, with its defaults merged in."""

    suite: str
    name: str
    experiment: str
    arguments: dict[str, Any]
    partition: str = "per-gpu"
    cgroup: str | None = None
    cgroup_optional: bool = False  # use the student groups when they exist, else warn
    prepare: list[str] = field(default_factory=list)
    exec_prefix: list[str] = field(default_factory=list)
    max_duration: float = DEFAULT_MAX_DURATION
    tags: list[str] = field(default_factory=list)
    definition: dict[str, Any] = field(default_factory=dict)

    @property
    def fullname(self) -> str:
        return f"{self.suite}.{self.name}"

    def argv(self) -> list[str]:
        return arguments_to_argv(self.arguments)


@dataclass
class Profile:
    name: str
    path: Path
    jobs: dict[str, Job]

    @property
    def shipped(self) -> bool:
        """A profile shipped with milarun (its jobs' arguments are tested with it)."""
        return self.path.resolve().parent == PROFILE_DIR.resolve()

    def select(self, names: list[str] | None = None, tags: list[str] | None = None) -> list[Job]:
        """Jobs by name and/or tag, in profile order; unknown names list the valid ones."""
        unknown = [n for n in names or [] if n not in self.jobs]
        if unknown:
            close = errors.close_names(unknown[0], list(self.jobs))
            raise ProfileError(
                f"profile {self.path}: no job named {', '.join(unknown)}{close}; "
                f"valid names: {', '.join(self.jobs)}"
            )
        chosen = [j for j in self.jobs.values() if not names or j.name in names]
        if tags:
            chosen = [j for j in chosen if set(tags) & set(j.tags)]
            if not chosen:
                known = sorted({t for j in self.jobs.values() for t in j.tags})
                which = "of the named jobs" if names else "job"
                raise ProfileError(
                    f"profile {self.path}: no {which} has tag {', '.join(tags)}; "
                    f"known tags: {', '.join(known) or 'none'}"
                )
        return chosen


def arguments_to_argv(arguments: dict[str, Any]) -> list[str]:
    """{flag: value} -> argv; ``true`` gives a bare flag, ``false``/null omit it."""
    argv: list[str] = []
    for key, value in arguments.items():
        flag = key if key.startswith("-") else f"--{key}"
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def find_profile(spec: str) -> Path:
    """A path, or the name of a profile shipped with milarun (``quick``)."""
    path = Path(spec)
    if path.is_file():
        return path
    shipped = PROFILE_DIR / (spec if spec.endswith(".json") else f"{spec}.json")
    if "/" not in spec and shipped.is_file():
        return shipped
    names = sorted(p.stem for p in PROFILE_DIR.glob("*.json"))
    raise ProfileError(f"profile '{spec}' not found: give a JSON file or one of {', '.join(names)}")


def load_profile(spec: str) -> Profile:
    path = find_profile(spec)
    deep = False
    try:
        if path.stat().st_size > results.MAX_FILE_BYTES:
            raise ProfileError(
                f"profile {path}: larger than {results.MAX_FILE_BYTES // 2**20} MiB; not a profile"
            )
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ProfileError(
            f"profile {path}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}"
        ) from err
    except (OSError, UnicodeDecodeError) as err:
        raise ProfileError(f"profile {path}: cannot read it ({err})") from err
    except RecursionError:
        deep = True
    if deep or results.too_deep(data, results.MAX_DEPTH):
        raise ProfileError(
            f"profile {path}: JSON nested deeper than {results.MAX_DEPTH} levels; not a profile"
        )
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path}: must be an object of job name -> definition")
    defaults = data.get("*", {})
    _check_keys(path, "*", defaults)
    suite = path.stem
    jobs = {}
    for name, definition in data.items():
        if name == "*":
            continue
        _check_name(path, suite, name)
        _check_keys(path, name, definition)
        jobs[name] = _make_job(path, suite, name, _merge(defaults, definition))
    if not jobs:
        raise ProfileError(f"profile {path}: defines no job")
    return Profile(suite, path, jobs)


def _check_name(path: Path, suite: str, name: str) -> None:
    """Job names become file names (``<suite>.<name>[.<k>].J<id>...``): safe and bounded."""
    try:
        results.safe_name(suite, "profile file name")
        results.safe_name(name, "job name")
        # room for a gpu-progression step's ``.<k>``
        results.safe_name(f"{suite}.{name}", "test name", results.MAX_NAME - 8)
    except errors.InputError as err:
        raise ProfileError(f"profile {path}, job {name[:60]!r}: {err}; rename it") from err


def _check_keys(path: Path, name: str, definition: Any) -> None:
    if not isinstance(definition, dict):
        raise ProfileError(f"profile {path}, job '{name}': must be an object")
    unknown = sorted(set(definition) - JOB_KEYS)
    if unknown:
        raise ProfileError(
            f"profile {path}, job '{name}': unknown key '{unknown[0]}'; "
            f"valid keys: {', '.join(sorted(JOB_KEYS))}"
        )


def _merge(defaults: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """Job values override the defaults; ``arguments`` and ``partition_scheme`` merge."""
    merged = copy.deepcopy(defaults)
    for key, value in job.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _make_job(path: Path, suite: str, name: str, d: dict[str, Any]) -> Job:
    def bad(key: str, why: str) -> ProfileError:
        return ProfileError(f"profile {path}, job '{name}', key '{key}': {why}")

    experiment = d.get("experiment")
    if not isinstance(experiment, str) or ":" not in experiment:
        raise bad("experiment", f"needs 'module:function', got {experiment!r}")
    module = experiment.split(":", 1)[0]
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise bad("experiment", f"module '{module}' cannot be imported")
    arguments = d.get("arguments", {})
    if not isinstance(arguments, dict):
        raise bad("arguments", "must be an object of flag -> value")
    scheme = d.get("partition_scheme", {"type": "per-gpu"})
    if not isinstance(scheme, dict) or scheme.get("type", "per-gpu") not in PARTITION_TYPES:
        raise bad("partition_scheme", f"type must be one of {', '.join(PARTITION_TYPES)}")
    unknown = set(scheme) - {"type", "cgroup", "optional"}
    if unknown:
        raise bad(
            "partition_scheme", f"unknown field '{sorted(unknown)[0]}' (type, cgroup, optional)"
        )
    if not isinstance(scheme.get("optional", False), bool):
        raise bad("partition_scheme", "'optional' must be true or false")
    prepare = d.get("prepare", [])
    prepare = [prepare] if isinstance(prepare, str) else prepare
    if not isinstance(prepare, list) or not all(isinstance(c, str) for c in prepare):
        raise bad("prepare", "must be a shell command or a list of them")
    prefix = d.get("exec_prefix", [])
    prefix = prefix.split() if isinstance(prefix, str) else prefix
    if not isinstance(prefix, list) or not all(isinstance(c, str) for c in prefix):
        raise bad("exec_prefix", "must be a list of argv words")
    max_duration = d.get("max_duration", DEFAULT_MAX_DURATION)
    if (
        isinstance(max_duration, bool)
        or not isinstance(max_duration, (int, float))
        or not math.isfinite(max_duration)
        or max_duration <= 0
    ):
        raise bad("max_duration", f"must be a positive number of seconds, got {max_duration!r}")
    tags = d.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise bad("tags", "must be a list of strings")
    return Job(
        suite=suite,
        name=name,
        experiment=experiment,
        arguments=arguments,
        partition=scheme.get("type", "per-gpu"),
        cgroup=scheme.get("cgroup"),
        cgroup_optional=scheme.get("optional", False),
        prepare=prepare,
        exec_prefix=prefix,
        max_duration=float(max_duration),
        tags=tags,
        definition=d,
    )
