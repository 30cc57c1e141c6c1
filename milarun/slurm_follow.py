"""Following submitted Slurm jobs and checking that every node recorded its results.

``slurm wait`` polls each job's state (scontrol, else sacct), prints a line when a job or a
node changes, and at the end runs ``check``: a node of the allocation that recorded nothing
for an expected test gets a FAIL record for it in ``<out>/nodes/<node>/``, named, never a
silent gap. The batch script runs the same check as its last step; a job cancelled before
that (scancel) is checked by ``slurm wait``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from milarun import records, results, slurmenv
from milarun.slurm import SLURM_FOLDER, SlurmError, Submission, expand_nodelist, \
    load_submissions, slurm_command

POLL_SECONDS = 2.0
# Slurm's states of a job that has ended
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
         "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
# The failure kind of a result a node never wrote, by the job's end state
KIND_OF_STATE = {"CANCELLED": "interrupted", "TIMEOUT": "timeout", "PREEMPTED": "interrupted",
                 "OUT_OF_MEMORY": "oom", "DEADLINE": "timeout"}


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, ... ; UNKNOWN when Slurm forgot the job
    exit_code: str = ""
    nodelist: str = ""
    reason: str = ""

    @property
    def ended(self) -> bool:
        return self.state in ENDED or self.state == "UNKNOWN"

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code in ("", "0:0")


def _fields(line: str) -> dict[str, str]:
    pairs = (word.split("=", 1) for word in line.split() if "=" in word)
    return {k: v for k, v in pairs}


def job_state(job_id: str) -> JobState:
    """The job's state from scontrol (recent jobs), else from sacct (accounting)."""
    try:
        info = _fields(slurm_command(["scontrol", "show", "job", "-o", job_id],
                                     f"reading job {job_id}"))
        nodes = info.get("NodeList", "")
        return JobState(job_id, info.get("JobState", "UNKNOWN"), info.get("ExitCode", ""),
                        "" if nodes == "(null)" else nodes, info.get("Reason", ""))
    except SlurmError:
        pass
    try:
        lines = slurm_command(["sacct", "-X", "-n", "-P", "-j", job_id, "-o",
                               "State,ExitCode,NodeList"], f"reading job {job_id}")
    except SlurmError:
        return JobState(job_id, "UNKNOWN")
    for line in lines.splitlines():
        state, code, nodes = (line.split("|") + ["", "", ""])[:3]
        return JobState(job_id, state.split()[0] if state else "UNKNOWN", code, nodes)
    return JobState(job_id, "UNKNOWN")


def _job_results(folder: Path, job_id: str) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The results in one node folder that this Slurm job wrote."""
    for path in sorted(folder.glob("*.json")):
        if results.parse_filename(path.name) is None:
            continue
        try:
            data = results.load_result(path)
        except ValueError:
            continue
        if str((data.get("slurm") or {}).get("job_id")) == job_id:
            yield path, data


def _missing_record(name: str, function: str, node: str, job: JobState, nodes: list[str],
                    outdir: Path, why: str) -> dict[str, Any]:
    kind = KIND_OF_STATE.get(job.state, "crash")
    message = (f"node {node} recorded no result for {name} in Slurm job {job.job_id} "
               f"({why}; job state {job.state}"
               + (f", exit {job.exit_code}" if job.exit_code else "")
               + f"): see {outdir / SLURM_FOLDER} for the job's output")
    return records.ResultRecord(
        name=name, job_id=f"slurm{job.job_id}", dataroot="", outdir=str(outdir),
        call=records.Call(function, []), failure=records.Failure(kind, message),
        error=message, device="", devices=[], gpu=None, device_count=0, environ={},
        isolation=None, returncode=None, written_by="milarun slurm check", node=node,
        slurm={"job_id": job.job_id, "step_id": None, "node": node, "node_id": None,
               "nodelist": job.nodelist or ",".join(nodes), "nnodes": len(nodes),
               "state": job.state, "exit_code": job.exit_code},
    ).to_dict()


def check(outdir: Path, job_id: str, nodes: list[str] | None = None,
          job: JobState | None = None) -> list[Path]:
    """Write a FAIL record for every expected result a node of the job did not record;
    returns the files written (none when nothing is missing)."""
    found = load_submissions(outdir, job_id)
    if not found:
        raise SlurmError(f"{outdir / SLURM_FOLDER}: no submission of job {job_id} recorded "
                         "there (was it submitted with milarun slurm?)")
    record = found[-1][1]
    job = job or job_state(job_id)
    if nodes is None:
        nodes = expand_nodelist(job.nodelist) if job.nodelist else []
    written = []
    base = outdir / slurmenv.NODES_FOLDER
    heads = nodes[:1] if record.kind == "scaling" else nodes
    recorded_anywhere = {data["name"] for node in nodes for _, data in
                         _job_results(base / node, job_id)}
    for node in heads:
        have = (recorded_anywhere if record.kind == "scaling"
                else {data["name"] for _, data in _job_results(base / node, job_id)})
        why = "no result at all" if not have else "others were recorded"
        for name in record.expected:
            if name in have:
                continue
            fail = _missing_record(name, record.functions.get(name, "?"), node, job, nodes,
                                   outdir, why)
            written.append(results.write_result(base / node, fail, results.utc_stamp()))
    return written


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


def follow(outdir: Path, submission: Submission, say: Callable[[str], None],
           poll: float = POLL_SECONDS) -> dict[str, JobState]:
    """Poll the submission's jobs until all have ended, saying what changes; then check
    each one. Returns the final state of every job."""
    states: dict[str, JobState] = {}
    seen_nodes: dict[str, list[str]] = {}
    counts: dict[str, tuple[int, int]] = {}
    pending = list(submission.job_ids)
    while pending:
        for job_id in list(pending):
            state = job_state(job_id)
            before = states.get(job_id)
            if before is None or (before.state, before.nodelist) != (state.state, state.nodelist):
                where = f" on {state.nodelist}" if state.nodelist else ""
                why = f" ({state.reason})" if state.reason not in ("", "None") else ""
                say(f"job {job_id}: {state.state}{where}{why}")
            states[job_id] = state
            if state.nodelist and job_id not in seen_nodes:
                seen_nodes[job_id] = expand_nodelist(state.nodelist)
            if state.ended:
                pending.remove(job_id)
        nodes = [n for names in seen_nodes.values() for n in names]
        for node, count in node_counts(outdir, nodes, submission.submitted_at - 1).items():
            if counts.get(node) != count:
                counts[node] = count
                say(f"  {node}: {count[0]} result(s), {count[1]} FAIL")
        if pending:
            time.sleep(poll)
    for job_id, state in states.items():
        for path in check(outdir, job_id, seen_nodes.get(job_id), state):
            say(f"  FAIL recorded for a missing result: {path}")
    return states
