"""The run manifest: ``.milarun-run.<stamp>.manifest`` (JSON) at the top of a ``jobs``
output folder.

Written before the first job starts (so a full disk stops the run before anything runs),
updated as each instance ends and completed when the run ends, it says what the run was
asked to do and how far it got. A run cut short (its supervisor killed, a signal, an error)
is recognisable afterwards, and ``report`` lists the tests it never ran, with the reason.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milarun import errors
from milarun.machine import provenance, slurmenv, sysinfo, watchdog
from milarun.results.files import json_text, write_text_atomic
from milarun.results.jsonfile import read_json
from milarun.results.names import safe_name, utc_stamp
from milarun.results.run_manifest import KIND, MAX_TIME, EndedInstance, MachineRecord, RunManifest

# Neither *.json nor visible: no reader of results (ours or a user's glob) takes it for one.
PREFIX, SUFFIX = ".milarun-run.", ".manifest"
MACHINE = "sysinfo"  # the machine record kept beside it: <PREFIX><stamp>.sysinfo
# bytes the file keeps from the start, for the updates to come (each instance's end entry)
RESERVE, RESERVE_PER_INSTANCE = 4096, 512
log = logging.getLogger("milarun")


class ManifestWriter:
    """One ``jobs`` run's manifest, rewritten in place (atomically) as the run goes on."""

    def __init__(self, path: Path, manifest: RunManifest):
        self.path, self.manifest = path, manifest
        self._warned = False
        self.size = 0  # bytes the file keeps (its JSON padded with spaces): start() sets it

    @classmethod
    def start(
        cls,
        outdir: Path,
        profile: str,
        tests: list[str],
        repeat: int,
        devices: list[str],
        instances: list[tuple[str, str]] | None = None,
        challenge: str | None = None,
    ) -> ManifestWriter:
        """Write the manifest of a run about to start; WriteError when the folder cannot
        take it (full disk, read-only), before any job runs. ``instances``: every (result
        name, job id) the run will record, so that one lost instance of many is named;
        ``challenge``: the tender's random value (`jobs --tender`): the run was made for it."""
        started = time.time()
        record = RunManifest(
            profile=profile,
            status="running",
            reason=None,
            started_at=started,
            finished_at=None,
            pid=os.getpid(),
            host=socket.gethostname(),
            devices=list(devices),
            repeat=repeat,
            planned=sorted(tests),
            instances=[(t, j) for t, j in instances or ()],
            challenge=challenge,
        )
        path = Path(outdir) / f"{PREFIX}{utc_stamp(started)}{SUFFIX}"
        found = cls(path, record)
        # the room its updates will take, held from the start: a disk that fills mid-run
        # still lets it say how the run ended (see _save)
        found.size = RESERVE + RESERVE_PER_INSTANCE * (len(instances or ()) or len(tests) * repeat)
        write_text_atomic(path, found._text())
        return found

    def keep(self, kind: str, text: str) -> None:
        """Write ``<PREFIX><stamp>.<kind>`` beside the manifest: the records a bid package
        takes from the run folder (``sysinfo``: this machine; ``profile``: the profile as
        run). A failed write is a warning: the run matters more."""
        path = self.path.with_name(self.path.name.removesuffix(SUFFIX) + f".{kind}")
        try:
            write_text_atomic(path, text)
        except (errors.WriteError, FileExistsError) as err:
            log.warning("%s not kept in the run folder: %s", kind, err)

    def keep_machine(self) -> None:
        """The machine's system record and reproducibility record, at the run's start."""
        record = {"system": sysinfo.system_record(), "provenance": provenance.record()}
        self.keep(MACHINE, json.dumps(record, indent=2, default=str))

    def instance_ended(
        self,
        name: str,
        job_id: str,
        result: Path | None,
        success: bool,
        unwritten: str | None = None,
    ) -> None:
        """``unwritten``: why its result could not be written (a full disk): it has none."""
        ended = EndedInstance(name, job_id, success, result.name if result else None, unwritten)
        self.manifest.ended.append(ended)
        self._save()

    def instance_written(self, name: str, job_id: str, result: Path) -> None:
        """A result held in memory (its disk was full) written at last: in this folder it is
        the instance's result; elsewhere the entry keeps ``unwritten`` and says where it is
        (``written_to``), for the report to say how to move it here."""
        for entry in self.manifest.ended:
            if (entry.test, entry.job_id) == (name, job_id) and entry.unwritten:
                if result.parent == self.path.parent:
                    entry.result, entry.unwritten = result.name, None
                else:
                    entry.written_to = str(result)
        self._save()

    def finish(self, status: str, reason: str | None = None) -> None:
        """``complete``, ``interrupted`` or ``failed`` (with the reason)."""
        self.manifest.status, self.manifest.reason = status, reason
        self.manifest.finished_at = time.time()
        self._save()

    def _text(self) -> str:
        """Its JSON, padded with spaces to the size the file keeps."""
        text = json_text(self.manifest.to_dict())
        return text + " " * (self.size - len(text.encode()) - 1) + "\n"

    def _save(self) -> None:
        # Once started, the results matter more than the manifest: a failed update is a
        # warning, never the end of the run.
        text = self._text()
        try:
            write_text_atomic(self.path, text, replace=True)
        except errors.WriteError as err:
            if self._overwrite(text.encode()):
                return
            if not self._warned:
                log.warning("run manifest not updated: %s", err)
                self._warned = True

    def _overwrite(self, data: bytes) -> bool:
        """Where a new file cannot be written (a full disk), the update written over the
        file's own bytes, when it fits in them: no new block needed, but not atomic (so
        only then)."""
        try:
            with open(self.path, "r+b") as f:
                room = os.fstat(f.fileno()).st_size
                if len(data) > room:
                    return False
                f.write(data + b" " * (room - len(data)))  # JSON may end with spaces
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            return False
        return True


@dataclass(frozen=True)
class CutShort:
    """A run in a folder that did not complete: when it started, why, and which of its
    planned instances have no recorded end (never started, or lost with their supervisor)."""

    path: Path
    status: str  # "running" (supervisor gone), "interrupted", "failed"; "complete": unwritten
    reason: str
    started_at: float
    without_result: tuple[str, ...]  # planned tests with an instance that recorded no end
    lost: tuple[tuple[str, str], ...] = ()  # those instances: (test, job id)
    elsewhere: tuple[str, ...] = ()  # results of it written to another folder (a full disk)

    def describe(self, root: Path | None = None) -> str:
        """What happened to the run; ``root``: its folder named relative to that one (a bid
        package names no path of the vendor's machine)."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
        folder = self.path.parent
        if root is not None:
            inner = folder.resolve().relative_to(Path(root).resolve()).as_posix()
            folder = Path("the results folder" if inner == "." else inner)
        # a Slurm fleet's node folder (<out>/nodes/<node>) says which node it was
        where = (
            f" on node {self.path.parent.name}"
            if self.path.parent.parent.name == slurmenv.NODES_FOLDER
            else f" in {folder}"
        )
        what = "could not write every result" if self.status == "complete" else "was cut short"
        return f"the jobs run started {when}{where} {what} ({self.reason})"

    def missing(self) -> str:
        """``quick.vae (J0.1), quick.cart (J0.0, J0.1)``: what no instance recorded (and
        how to bring here those written to another folder)."""
        if not self.lost:
            return (", ".join(self.without_result) or "none of its tests") + self._moved()
        ids: dict[str, list[str]] = {}
        for test, job_id in self.lost:
            ids.setdefault(test, []).append(f"J{job_id}")
        return ", ".join(f"{t} ({', '.join(j)})" for t, j in ids.items()) + self._moved()

    def _moved(self) -> str:
        if not self.elsewhere:
            return ""
        shown = " ".join(p[:300] for p in self.elsewhere[:MAX_SHOWN])
        more = (
            f" (and {len(self.elsewhere) - MAX_SHOWN} more)"
            if len(self.elsewhere) > MAX_SHOWN
            else ""
        )
        return (
            f"; {len(self.elsewhere)} of them written to another folder, this disk being "
            f"full: move them here: mv {shown} {self.path.parent}/{more}"
        )


MAX_MANIFESTS = 1000  # below one folder: a report reads at most this many
MAX_SHOWN = 5  # results written elsewhere named in a report line


STATUSES = ("running", "complete", "interrupted", "failed")
MAX_PLANNED = 10_000  # tests one run plans (jobs x devices): far more is no manifest of ours
_warned: set[Path] = set()


def _problem(data: Any) -> str | None:
    """Why a parsed manifest cannot be read (the field and its value), or None."""
    if not isinstance(data, dict) or data.get("kind") != KIND:
        return "not a milarun run manifest"
    if data.get("status") not in STATUSES:
        return f"'status' {str(data.get('status'))[:40]!r} is not one of {', '.join(STATUSES)}"
    if not isinstance(data.get("reason"), (str, type(None))):
        return "'reason' is not a string"
    started = data.get("started_at")
    if isinstance(started, bool) or not (
        isinstance(started, (int, float)) and 0 <= started <= MAX_TIME  # NaN compares False
    ):
        return f"'started_at' {str(started)[:40]} is not a time"
    planned, ended = data.get("planned"), data.get("ended")
    if not isinstance(planned, list) or len(planned) > MAX_PLANNED:
        return f"'planned' is not a list of at most {MAX_PLANNED} test names"
    for test in planned:
        try:
            safe_name(test, "'planned' test")
        except errors.InputError as err:
            return str(err)
    if not isinstance(ended, list) or not all(
        isinstance(e, dict) and isinstance(e.get("test"), str) for e in ended
    ):
        return "'ended' is not a list of objects with a 'test' name"
    return None


def _read(path: Path) -> RunManifest:
    data = read_json(path, errors.InputError)
    problem = _problem(data)
    if problem:
        raise errors.InputError(f"{path}: {problem}")
    return RunManifest.from_dict(data)


def _manifests(folder: Path, recursive: bool = False) -> Iterator[tuple[Path, RunManifest]]:
    """The readable run manifests of a folder (and below it), in time order per folder; a
    damaged one (a folder of that name, a hand-edited field) is passed by with a warning
    naming it, once."""
    pattern = f"{PREFIX}*{SUFFIX}"
    found = Path(folder).rglob(pattern) if recursive else Path(folder).glob(pattern)
    paths = sorted(p for _, p in zip(range(MAX_MANIFESTS), found))
    for path in paths:  # a folder of that name is one more damaged manifest: warned
        try:
            yield path, _read(path)
        except errors.InputError as err:
            if path not in _warned:
                _warned.add(path)
                log.warning("%s; run manifest ignored", err)


def run_manifests(folder: Path, recursive: bool = True) -> list[tuple[Path, RunManifest]]:
    """Every readable run manifest in ``folder`` (and below it), with its path (a damaged
    one is warned)."""
    return list(_manifests(folder, recursive))


def machine_path(path: Path) -> Path:
    """Where the run of the manifest at ``path`` kept its machine record (keep_machine)."""
    return path.with_name(path.name.removesuffix(SUFFIX) + f".{MACHINE}")


def kept_machine(path: Path) -> MachineRecord | None:
    """The machine record the run of the manifest at ``path`` kept, None where none."""
    return MachineRecord.read(machine_path(path))


def cut_short(outdir: Path, recorded: Collection[tuple[str, str]] | None = None) -> list[CutShort]:
    """The runs in ``outdir`` or any folder below it that did not complete (or completed
    without writing every result: a full disk), oldest first. A manifest still marked
    running while no live process holds its folder's lock lost its supervisor.
    ``recorded``: the (test, job id) of the results in the folder; an instance one of them
    stands for (a later run's, into the same folder) is no longer named as without one."""
    found = []
    done = set(recorded or ())
    done_tests = {t for t, _ in done}
    # _read checked status, reason, started_at, planned and ended: only instances is free
    for path, run in _manifests(outdir, recursive=True):
        status = run.status
        unwritten = [e.unwritten for e in run.ended if e.unwritten]
        if (status == "complete" and not unwritten) or (
            status == "running" and watchdog.outdir_busy(path.parent)
        ):
            continue
        if status == "running":
            reason = "its supervisor ended without finishing it: killed?"
        elif status == "complete":
            # the first one's error without its path: "cannot write (No space left on device)"
            reason = f"{len(unwritten)} result(s) not written: {unwritten[0].rpartition(': ')[2]}"
        else:
            reason = (run.reason or status)[:200]
        ended = {(e.test, e.job_id) for e in run.ended if not e.unwritten}
        lost = tuple(p for p in run.instances if p not in ended | done)
        without = (
            tuple(dict.fromkeys(t for t, _ in lost))
            if run.instances
            else tuple(t for t in run.planned if t not in {t for t, _ in ended} | done_tests)
        )
        elsewhere = tuple(e.written_to for e in run.ended if e.unwritten and e.written_to)
        found.append(
            CutShort(path, status, reason, float(run.started_at), without, lost, elsewhere)
        )
    return sorted(found, key=lambda cut: cut.started_at)


def planned_since(folder: Path, since: float) -> set[str] | None:
    """The tests the runs in ``folder`` started at or after ``since`` planned; None when no
    such run left a manifest (its supervisor never started)."""
    pairs = planned_instances_since(folder, since)
    return None if pairs is None else {t for t, _ in pairs}


def planned_instances_since(folder: Path, since: float) -> set[tuple[str, str | None]] | None:
    """(test, job id) of every instance the runs in ``folder`` started at or after ``since``
    planned (job id None for a manifest older than the instance list); None when no such
    run left a manifest."""
    planned: set[tuple[str, str | None]] | None = None
    for _, run in _manifests(folder):
        if run.started_at >= since:
            pairs: set[tuple[str, str | None]] = set(run.instances)
            pairs = pairs or {(t, None) for t in run.planned}
            planned = (planned or set()) | pairs
    return planned
