"""What Slurm says of a job: its state (one squeue for many jobs; scontrol, then sacct, for a
job the controller has forgotten), the kind of its end, and the nodes it ran on."""

from __future__ import annotations

from dataclasses import dataclass

from milarun.errors import SlurmError
from milarun.slurm.submit import slurm_command

# Slurm's states of a job that has ended; GONE: neither the controller nor accounting
# knows the job any more
ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
    "SPECIAL_EXIT",
    "GONE",
}
# The failure kind of a result a node never wrote, by the job's end state
KIND_OF_STATE = {
    "CANCELLED": "interrupted",
    "TIMEOUT": "timeout",
    "PREEMPTED": "interrupted",
    "OUT_OF_MEMORY": "oom",
    "DEADLINE": "timeout",
}
NO_NODES = ("", "(null)", "None assigned")


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, ... GONE
    exit_code: str = ""
    nodelist: str = ""
    reason: str = ""
    check_problem: str | None = None  # `slurm check` could not check or record all of it

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def ok(self) -> bool:
        return (
            self.state == "COMPLETED"
            and self.exit_code in ("", "0:0")
            and self.check_problem is None
        )


def _fields(line: str) -> dict[str, str]:
    pairs = (word.split("=", 1) for word in line.split() if "=" in word)
    return {k: v for k, v in pairs}


def _nodes(text: str) -> str:
    return "" if text.strip() in NO_NODES else text.strip()


def _final(job_id: str) -> JobState:
    """An ended job's state and exit code: scontrol while it remembers, then sacct."""
    try:
        info = _fields(
            slurm_command(["scontrol", "show", "job", "-o", job_id], f"reading job {job_id}")
        )
        return JobState(
            job_id,
            info.get("JobState", "GONE").split()[0],
            info.get("ExitCode", ""),
            _nodes(info.get("NodeList", "")),
            info.get("Reason", ""),
        )
    except SlurmError as err:
        if "Invalid job id" not in str(err):
            raise
    try:
        lines = slurm_command(
            ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State,ExitCode,NodeList"],
            f"reading job {job_id}",
        )
    except SlurmError:  # no accounting here: the job is gone without a trace
        return JobState(job_id, "GONE")
    for line in lines.splitlines():
        state, code, nodes = (line.split("|") + ["", "", ""])[:3]
        if state:
            return JobState(job_id, state.split()[0], code, _nodes(nodes))
    return JobState(job_id, "GONE")


def job_states(job_ids: list[str]) -> dict[str, JobState]:
    """The state of each job; SlurmError when Slurm could not be asked (try again later)."""
    try:
        out = slurm_command(
            ["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%N|%r"],
            "reading the jobs' states",
        )
    except SlurmError as err:
        if "Invalid job id" not in str(err):
            raise
        out = ""  # none of them is in the queue any more
    states = {}
    for line in out.splitlines():
        job, state, nodes, reason = (line.split("|") + ["", "", "", ""])[:4]
        if job in job_ids:
            states[job] = JobState(job, state, "", _nodes(nodes), reason)
    for job in job_ids:
        if job not in states or states[job].ended:  # its exit code, or its end
            states[job] = _final(job)
    return states
