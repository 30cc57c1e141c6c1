"""The doctor's data checks: what each job of a profile reads, and whether it is there
(real or synthetic, large enough), with the command that makes what is missing."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from milarun.doctor.check import FAIL, INFO, PASS, WARN, Check
from milarun.run import profile


# -- data and disk --------------------------------------------------------------------------
@dataclass
class DataNeed:
    """A dataset a profile's tests read; ``command``/``size``: what its prepare step makes."""

    name: str
    jobs: list[str] = field(default_factory=list)
    command: list[str] | None = None  # `milarun dataset ...` arguments
    size: int | None = None  # synthetic examples asked for; None: the real data


def _prepared(job: profile.Job) -> dict[str, tuple[list[str], int | None]]:
    """Datasets a job's prepare commands make: name -> (dataset arguments, synthetic size)."""
    made = {}
    for line in job.prepare:
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        at = next(
            (
                i
                for i in range(1, len(words))
                if words[i] == "dataset" and words[i - 1].endswith("milarun")
            ),
            None,
        )
        if at is None:
            continue
        args = words[at + 1 :]
        first_flag = next((i for i, a in enumerate(args) if a.startswith("-")), len(args))
        size = None
        if "--synthetic" in args and "--size" in args[:-1]:
            value = args[args.index("--size") + 1]
            size = int(value) if value.isdigit() else None
        for name in args[:first_flag]:
            made[name] = (args, size)
    return made


def data_needs(prof: profile.Profile, read_by: Mapping[str, tuple[str, ...]]) -> list[DataNeed]:
    """Each dataset the profile's tests read (``read_by``: experiment module -> datasets)."""
    needs: dict[str, DataNeed] = {}
    for job in prof.jobs.values():
        made = _prepared(job)
        for name in read_by.get(job.experiment.split(":", 1)[0], ()):
            need = needs.setdefault(name, DataNeed(name))
            need.jobs.append(job.name)
            if name in made and need.command is None:
                need.command, need.size = made[name]
    return list(needs.values())


def data_checks(prof: profile.Profile, root: Path) -> tuple[list[Check], dict[str, float]]:
    """One check per dataset the profile reads; and the bytes each missing one needs."""
    from milabench import datasets as ds  # the data side, only when a profile is checked

    checks, missing = [], {}
    for need in data_needs(prof, ds.READ_BY):
        folder = ds.resolve(need.name).folder(root)
        who = f"read by {', '.join(need.jobs)}"
        try:
            ds.require(folder, need.name, root)
        except ds.DataMissing as err:
            missing[need.name] = ds.disk_bytes(need.name, need.size)
            if (folder / ds.PARTIAL).exists():  # the message says how to complete it
                checks.append(Check(f"data {need.name}", FAIL, f"incomplete; {who}", str(err)))
            elif need.command:  # the profile's prepare step makes it: not a problem
                words = need.command + ([] if "-d" in need.command else ["-d", str(root)])
                checks.append(
                    Check(
                        f"data {need.name}",
                        INFO,
                        f"not in {folder} yet; `jobs {prof.name}` makes it first; {who}",
                        f"`milarun dataset {shlex.join(words)}` (what `jobs "
                        f"{prof.name}` runs first)",
                    )
                )
            else:
                checks.append(
                    Check(
                        f"data {need.name}",
                        FAIL,
                        f"not in {folder}; {who}",
                        f"`milarun dataset {need.name} -d {root}` (real data), or "
                        "the same with --synthetic (generated offline)",
                    )
                )
            continue
        detail = f"{ds.describe(folder)} in {folder}; {who}"
        try:
            if need.size is not None:
                ds.ready(folder, True, need.size)
        except ds.DataMissing as err:  # smaller than the profile asks: it runs on less
            checks.append(Check(f"data {need.name}", WARN, detail, str(err)))
            continue
        checks.append(Check(f"data {need.name}", PASS, detail))
    if not checks:
        checks.append(Check("data", PASS, f"no test of {prof.name} reads a dataset"))
    return checks, missing
