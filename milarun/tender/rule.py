"""What every rule of ``milarun verify`` works with: the bid package as read (``Bid``), the
rule's outcome (``Ruling``: its name, PASS or FAIL, the evidence in one line) and the helpers
that read a package's untrusted values and name a few examples."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milarun.results import read
from milarun.results.folder import Loaded
from milarun.results.run_manifest import MachineRecord, RunManifest
from milarun.tender import rules

MAX_SHOWN = 3  # examples an evidence line names


@dataclass(frozen=True)
class Ruling:
    rule: str
    ok: bool
    evidence: str


@dataclass
class Bid:
    """An extracted package, read once for every rule."""

    tender: rules.Tender
    root: Path
    hashes: dict[str, str]  # every file's SHA-256 as extracted
    listed: dict[str, str]  # the MANIFEST's
    loaded: Loaded  # the tender's tests' results
    summary: dict[str, dict[str, Any]]
    extra_tests: list[str] = field(default_factory=list)  # run, but not in the tender
    manifests: list[tuple[Path, RunManifest]] = field(default_factory=list)
    machines: list[MachineRecord] = field(default_factory=list)  # the kept sysinfo records

    @property
    def views(self) -> list[read.ResultView]:
        return self.loaded.results


def base_test(name: str, jobs: Mapping[str, Any]) -> str | None:
    """The tender job a result belongs to (``quick.scaling.2`` -> ``quick.scaling``)."""
    if name in jobs:
        return name
    head, _, k = name.rpartition(".")
    return head if k.isdigit() and head in jobs else None


def as_list(value: Any) -> list[Any]:
    """A list read from a package's file, or empty (the file is untrusted)."""
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def some(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_SHOWN])
    return shown + (f" and {len(items) - MAX_SHOWN} more" if len(items) > MAX_SHOWN else "")
