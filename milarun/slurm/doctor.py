"""`milarun slurm doctor`: `milarun doctor [--active LEVEL]` on every node of an allocation,
then the per-node table (milarun.doctor.fleet).

One ``srun`` step, one task per node, each node whole (``--exclusive --mem=0``: a check that
shares its node measures its neighbours); a node that fails leaves the others running
(``--kill-on-bad-exit=0``). Each node writes its record to
``<out>/nodes/<node>/doctor-active.<stamp>.json`` and its output to
``<out>/slurm/doctor.<stamp>.<node>.out``. srun waits for every node: the table follows.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milarun import errors, results
from milarun.doctor import fleet
from milarun.doctor.active import record
from milarun.doctor.check import FAIL
from milarun.machine import slurmenv
from milarun.slurm.request import NODELIST_RE, PARTITION_RE, SLURM_FOLDER, TIME_RE
from milarun.slurm.submit import expand_nodelist, slurm_environ


@dataclass(frozen=True)
class DoctorRequest:
    outdir: Path
    nodes: int | None = None
    nodelist: str | None = None
    level: str | None = None  # None: the passive checks only
    devices: str | None = None
    partition: str | None = None
    time: str | None = None


@dataclass(frozen=True)
class Outcome:
    lines: list[fleet.NodeLine]
    stamp: str
    returncode: int  # srun's

    @property
    def exit_code(self) -> int:
        return 1 if self.returncode or any(x.status == FAIL for x in self.lines) else 0


def _check(request: DoctorRequest) -> None:
    if (request.nodes is None) == (not request.nodelist):
        raise errors.UsageError("slurm doctor: give --nodes N or --nodelist LIST (one of them)")
    if request.nodes is not None and request.nodes < 1:
        raise errors.UsageError(f"--nodes {request.nodes}: must be at least 1")
    if request.nodelist and not NODELIST_RE.match(request.nodelist):
        raise errors.UsageError(
            f"--nodelist {request.nodelist!r}: give Slurm node names such as node[1-4],gpu7"
        )
    if request.partition is not None and not PARTITION_RE.match(request.partition):
        raise errors.UsageError(f"--partition {request.partition!r}: give Slurm partition names")
    if request.time is not None and not TIME_RE.match(request.time):
        raise errors.UsageError(f"--time {request.time!r}: use Slurm's forms, e.g. 30 or 1:00:00")
    if request.level is not None and request.level not in ("quick", "full"):
        raise errors.UsageError(f"--active {request.level}: use quick or full")


def srun_words(request: DoctorRequest, stamp: str, python: str = sys.executable) -> list[str]:
    out = request.outdir.resolve()
    where = f"--nodelist={request.nodelist}" if request.nodelist else f"--nodes={request.nodes}"
    words = [
        "srun",
        where,
        "--ntasks-per-node=1",
        "--exclusive",
        "--mem=0",
        "--kill-on-bad-exit=0",
        "--job-name=milarun-doctor",
    ]
    words += [f"--partition={request.partition}"] if request.partition else []
    words += [f"--time={request.time}"] if request.time else []
    doctor = [python, "-m", "milarun", "doctor"]
    doctor += ["--active", request.level] if request.level else []
    doctor += ["--devices", request.devices] if request.devices else []
    node = '"$SLURMD_NODENAME"'  # Slurm's name of the node (--output's %N is the host's)
    folder = f"{shlex.quote(str(out / slurmenv.NODES_FOLDER))}/{node}"
    log = f"{shlex.quote(str(out / SLURM_FOLDER))}/doctor.{stamp}.{node}.out"
    name = f"{results.DOCTOR_RECORD}.{stamp}.json"
    inner = f"mkdir -p {folder} && exec {shlex.join(doctor)} --json {folder}/{name} >{log} 2>&1"
    return [*words, "bash", "-c", inner]


def _records(request: DoctorRequest, stamp: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Per node that ran (a record, or an output file), its record or None and why."""
    out = request.outdir
    logs = {
        p.name[len(f"doctor.{stamp}.") : -len(".out")]: p
        for p in (out / SLURM_FOLDER).glob(f"doctor.{stamp}.*.out")
    }
    name = f"{results.DOCTOR_RECORD}.{stamp}.json"
    found: dict[str, Any] = {}
    missing: dict[str, str] = {}
    nodes = set(logs) | {p.parent.name for p in (out / slurmenv.NODES_FOLDER).glob(f"*/{name}")}
    if request.nodelist:
        nodes |= set(expand_nodelist(request.nodelist))
    for node in nodes:
        path = out / slurmenv.NODES_FOLDER / node / name
        try:
            found[node] = record.read(path)
        except errors.InputError as err:
            found[node] = None
            tail = ""
            if node in logs:
                lines = logs[node].read_text(errors="replace").strip().splitlines()
                tail = f"; its output ends: {lines[-1][:200]}" if lines else ""
            missing[node] = f"no record ({str(err).rsplit(': ', 1)[-1]}){tail}"
    return found, missing


def run(request: DoctorRequest) -> Outcome:
    _check(request)
    (request.outdir / SLURM_FOLDER).mkdir(parents=True, exist_ok=True)
    stamp = results.utc_stamp()
    try:
        done = subprocess.run(srun_words(request, stamp), env=slurm_environ())
    except FileNotFoundError:
        raise errors.SlurmError(
            "srun not found: run this on a Slurm login node (or start "
            "scripts/slurm-dev-cluster.sh up)"
        ) from None
    found, missing = _records(request, stamp)
    if not found:
        raise errors.SlurmError(
            f"srun exited with {done.returncode} and no node wrote a record "
            f"(see {request.outdir / SLURM_FOLDER})"
        )
    return Outcome(fleet.compare(found, missing), stamp, done.returncode)
