"""Following submitted Slurm jobs and checking that every node recorded its results.

``slurm wait`` asks Slurm for the jobs' states (one squeue for all of them; sacct for a job
the controller has forgotten), prints a line when a job or a node changes, and at the end
runs ``check``: a node of the allocation that recorded nothing for a test it should have run
gets a FAIL record for it in ``<out>/nodes/<node>/``, named, never a silent gap. The batch
script runs the same check as its last step; a job cancelled before that (scancel) is
checked by ``slurm wait``. A Slurm query that fails (a busy controller) is retried, never
taken for the end of a job.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from milarun import errors, results
from milarun.errors import SlurmError
from milarun.machine import slurmenv
from milarun.results import manifest, read, records
from milarun.slurm.states import KIND_OF_STATE, JobState, job_states
from milarun.slurm.submit import SLURM_FOLDER, Submission, expand_nodelist, load_submissions

POLL_FIRST, POLL_MAX = 1.0, 5.0  # seconds between polls: growing while nothing changes
# A shared file system may list another node's new files late (NFS caches directory
# listings for up to a minute): a result missing at first is looked for again this long.
SETTLE_ENV, SETTLE_DEFAULT = "MILARUN_SLURM_SETTLE", 60.0


def _job_results(folder: Path, job_ids: set[str]) -> Iterator[read.ResultView]:
    """The results in one node folder that these Slurm jobs wrote."""
    for path in sorted(folder.glob("*.json")):
        if results.parse_filename(path.name) is None:
            continue
        try:
            data = results.load_result(path)
        except ValueError:
            continue
        view = read.ResultView.from_dict(data)
        if view.slurm is not None and str(view.slurm.job_id) in job_ids and view.named:
            yield view


def _missing_record(
    name: str,
    instance: str | None,
    function: str,
    node: str,
    job: JobState,
    nodes: list[str],
    outdir: Path,
    why: str,
) -> dict[str, Any]:
    """The FAIL record of an instance a node did not record: its own job id when the
    node's manifest planned it (a second check then finds it recorded), else slurm<job>."""
    kind = KIND_OF_STATE.get(job.state, "crash")
    what = f"{name} J{instance}" if instance else name
    message = (
        f"node {node} recorded no result for {what} in Slurm job {job.job_id} "
        f"({why}; job state {job.state}"
        + (f", exit {job.exit_code}" if job.exit_code else "")
        + f"): see {outdir / SLURM_FOLDER} for the job's output"
    )
    return records.ResultRecord(
        name=name,
        job_id=instance or f"slurm{job.job_id}",
        dataroot="",
        outdir=str(outdir),
        call=records.Call(function, ()),
        failure=records.Failure(kind, message),
        error=message,
        device="",
        devices=[],
        gpu=None,
        device_count=0,
        environ={},
        isolation=None,
        returncode=None,
        written_by="milarun slurm check",
        node=node,
        slurm=records.SlurmBlock(
            job_id=job.job_id,
            node=node,
            nodelist=job.nodelist or ",".join(nodes),
            nnodes=len(nodes),
            state=job.state,
            exit_code=job.exit_code,
        ),
    ).to_dict()


Instance = tuple[str, "str | None"]  # (result name, job id); None: any job id


def _missing(
    outdir: Path, record: Submission, job_id: str, nodes: list[str]
) -> dict[str, tuple[set[Instance], str]]:
    """Per node (the head only for scaling), the expected instances it has not recorded,
    and why. A node's expected instances are what its runs of this submission planned
    (their manifests: each (test, job id), so one lost instance of two is named); the
    submission's own list of tests where no run of it started there."""
    base = outdir / slurmenv.NODES_FOLDER
    recorded = {
        node: {(v.name, v.job_id) for v in _job_results(base / node, {job_id})} for node in nodes
    }
    anywhere = set().union(*recorded.values()) if recorded else set()
    missing = {}
    for node in nodes[:1] if record.kind == "scaling" else nodes:
        planned = planned_on(base / node, record)
        expected = planned if planned is not None else {(t, None) for t in record.expected}
        have = anywhere if record.kind == "scaling" else recorded[node]
        names = {name for name, _ in have}
        absent = {
            (t, j) for t, j in expected if ((t, j) not in have if j is not None else t not in names)
        }
        if absent:
            missing[node] = (absent, "no result at all" if not have else "others were recorded")
    return missing


def planned_on(folder: Path, submission: Submission) -> set[Instance] | None:
    """The instances the runs of this submission in a node folder planned (None: none
    started); 5 s of slack for a node clock behind the submitter's."""
    return manifest.planned_instances_since(folder, submission.submitted_at - 5)


def _job_nodes(record: Submission, job: JobState) -> list[str]:
    if job.nodelist:
        return expand_nodelist(job.nodelist)
    asked = dict(zip(record.job_ids, record.nodelists)).get(job.job_id)
    return expand_nodelist(asked) if asked else []  # never allocated: no node to name


def check(
    outdir: Path,
    job_id: str,
    nodes: list[str] | None = None,
    job: JobState | None = None,
    settle: float | None = None,
) -> list[Path]:
    """Write a FAIL record for every expected result a node of the job did not record;
    returns the files written (none when nothing is missing)."""
    found = load_submissions(outdir, job_id)
    for _ in range(20):  # sbatch may start a job before its submitter has recorded its id
        if found:
            break
        time.sleep(0.5)
        found = load_submissions(outdir, job_id)
    if not found:
        raise SlurmError(
            f"{outdir / SLURM_FOLDER}: no submission of job {job_id} recorded "
            "there (was it submitted with milarun slurm?)"
        )
    record = found[-1][1]
    job = job or job_states([job_id])[job_id]
    nodes = nodes if nodes is not None else _job_nodes(record, job)
    if not nodes and job.state == "GONE":
        # Slurm forgot the job (no accounting): the node folders its runs left are all
        # there is to go by; with none, nothing can be checked, and that is no success
        nodes = _nodes_with_runs(outdir, record, job_id)
        if not nodes:
            raise SlurmError(
                f"job {job_id}: Slurm no longer knows it (no accounting on this cluster) and "
                f"no folder in {outdir / slurmenv.NODES_FOLDER} holds a run of it: which "
                "nodes it had is unknown, nothing was checked"
            )
    if settle is None:
        settle = float(os.environ.get(SETTLE_ENV) or SETTLE_DEFAULT)
    deadline = time.monotonic() + settle
    missing = _missing(outdir, record, job_id, nodes)
    while missing and time.monotonic() < deadline:
        time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
        missing = _missing(outdir, record, job_id, nodes)
    written, unwritable = [], []
    # one checker at a time (the batch script's and `slurm wait`'s may meet)
    with open(outdir / SLURM_FOLDER / ".check.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for node, (absent, why) in sorted(_missing(outdir, record, job_id, nodes).items()):
            try:  # a node folder that takes no file must not stop the others' check
                for name, instance in sorted(absent, key=lambda a: (a[0], a[1] or "")):
                    fail = _missing_record(
                        name, instance, record.functions.get(name, "?"), node, job, nodes,
                        outdir, why,
                    )  # fmt: skip
                    written.append(
                        results.write_result(
                            outdir / slurmenv.NODES_FOLDER / node, fail, results.utc_stamp()
                        )
                    )
            except errors.WriteError as err:
                unwritable.append(f"node {node}: {len(absent)} missing result(s) ({err})")
    if unwritable:
        raise CheckIncomplete(written, "; ".join(unwritable))
    return written


class CheckIncomplete(SlurmError):
    """Some node's missing results could not be recorded; ``written`` are those that were."""

    def __init__(self, written: list[Path], problems: str):
        super().__init__(f"not recorded: {problems}; the other nodes were checked")
        self.written = written


def _nodes_with_runs(outdir: Path, record: Submission, job_id: str) -> list[str]:
    """Node folders holding a result of this job or a run started since its submission."""
    base = outdir / slurmenv.NODES_FOLDER
    return sorted(
        folder.name
        for folder in base.glob("*")
        if folder.is_dir()
        and (any(_job_results(folder, {job_id})) or planned_on(folder, record) is not None)
    )


def node_counts(outdir: Path, nodes: list[str], since: float) -> dict[str, tuple[int, int]]:
    """Per node, (results, of which FAIL) written since the submission (file names only)."""
    counts = {}
    for node in nodes:
        good = fail = 0
        for path in (outdir / slurmenv.NODES_FOLDER / node).glob("*.json"):
            parsed = results.parse_filename(path.name)
            if parsed is None or path.stat().st_mtime < since:
                continue
            fail += bool(parsed["failed"])
            good += not parsed["failed"]
        counts[node] = (good + fail, fail)
    return counts


def follow(
    outdir: Path, submission: Submission, say: Callable[[str], None], poll: float = POLL_FIRST
) -> dict[str, JobState]:
    """Poll the submission's jobs until all have ended, saying what changes; then check
    each one. Returns the final state of every job."""
    if not submission.job_ids:
        raise SlurmError(
            f"{outdir / SLURM_FOLDER}: its submission has no job id (sbatch accepted none)"
        )
    states: dict[str, JobState] = {}
    seen_nodes: dict[str, list[str]] = {}
    counts: dict[str, tuple[int, int]] = {}
    wait = poll
    while not states or not all(s.ended for s in states.values()):
        if states:
            time.sleep(wait)
        wait = min(wait * 1.5, POLL_MAX)
        try:
            now = job_states(
                [j for j in submission.job_ids if j not in states or not states[j].ended]
            )
        except SlurmError as err:  # a busy controller: ask again later
            say(f"  (Slurm did not answer: {err}; asking again)")
            continue
        for job_id, state in now.items():
            before = states.get(job_id)
            if before is None or (before.state, before.nodelist) != (state.state, state.nodelist):
                where = f" on {state.nodelist}" if state.nodelist else ""
                why = f" ({state.reason})" if state.reason not in ("", "None") else ""
                # back to the queue after it ran: requeued (a site that forces it), its
                # first run's results are still in the node folders
                again = " (requeued)" if before and before.state == "RUNNING" and state.state in (
                    "PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"
                ) else ""  # fmt: skip
                say(f"job {job_id}: {state.state}{again}{where}{why}")
                wait = poll
            states[job_id] = state
            if state.nodelist and job_id not in seen_nodes:
                seen_nodes[job_id] = expand_nodelist(state.nodelist)
        nodes = [n for names in seen_nodes.values() for n in names]
        for node, count in node_counts(outdir, nodes, submission.submitted_at - 1).items():
            if counts.get(node) != count:
                counts[node] = count
                say(f"  {node}: {count[0]} result(s), {count[1]} FAIL")
    for job_id, state in list(states.items()):
        try:
            written = check(outdir, job_id, seen_nodes.get(job_id), state)
        except CheckIncomplete as err:
            written = err.written
            say(f"  job {job_id}: check incomplete: {err}")
            states[job_id] = replace(state, check_problem=str(err))
        except SlurmError as err:  # still report what was recorded
            written = []
            say(f"  job {job_id}: not checked: {err}")
            states[job_id] = replace(state, check_problem=str(err))
        for path in written:
            say(f"  FAIL recorded for a missing result: {path}")
    return states


def failed_runs(outdir: Path, submission: Submission) -> int:
    """The failed results of this submission's jobs (older runs in the folder aside)."""
    jobs = set(submission.job_ids)
    return sum(
        not view.success
        for folder in (outdir / slurmenv.NODES_FOLDER).glob("*")
        for view in _job_results(folder, jobs)
    )
