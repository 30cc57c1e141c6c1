"""`milarun slurm fleet|scaling`: the suite on many nodes through Slurm's own tools.

Slurm allocates and launches, torchrun does the rendezvous, and on every node the usual
supervisor (`milarun jobs`) runs unchanged. This module writes the batch script (made by
milarun.slurm.script) into
``<out>/slurm/`` (readable and editable: an admin may submit it again by hand), submits it
with sbatch and records what it submitted (``<out>/slurm/<kind>.<stamp>.submission``, JSON
that result loaders pass by) for
``slurm wait`` and ``slurm check`` (milarun.slurm.follow). Not submitit: it pickles a
Python call and hides the script, which an admin must be able to read and edit.
"""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from milarun import errors, results
from milarun.errors import SlurmError
from milarun.machine import devices
from milarun.results.folder import check_outdir
from milarun.run import profile, suite
from milarun.slurm.request import (
    NODELIST_RE,
    PARTITION_RE,
    SLURM_FOLDER,
    SUBMISSION_SUFFIX,
    TIME_RE,
    SlurmRequest,
)
from milarun.slurm.script import render_script


@dataclass
class Submission:
    """The record of a submission: what ``slurm wait`` follows and ``slurm check`` checks."""

    kind: str
    profile: str
    script: str
    expected: list[str]  # result names each node (fleet) or the head (scaling) must record
    functions: dict[str, str] = field(default_factory=dict)  # result name -> test function
    job_ids: list[str] = field(default_factory=list)
    nodelists: list[str | None] = field(default_factory=list)  # per job, as requested
    submitted_at: float = 0.0

    def save(self, folder: Path, stamp: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        return results.write_atomic(
            folder / f"{self.kind}.{stamp}{SUBMISSION_SUFFIX}", asdict(self), replace=True
        )


def slurm_environ() -> dict[str, str]:
    """This environment, pointed at scripts/slurm-dev-cluster.sh's cluster when no other
    Slurm configuration is set (SLURM_CONF unset and /etc/slurm/slurm.conf absent)."""
    env = dict(os.environ)
    if "SLURM_CONF" not in env and not Path("/etc/slurm/slurm.conf").exists():
        dev = Path(
            os.environ.get("MILARUN_SLURM_DEV")
            or Path(os.environ.get("TMPDIR") or "/tmp") / "milarun-slurm-dev"
        )
        if _ours(dev) and _ours(dev / "slurm.conf"):
            env["SLURM_CONF"] = str(dev / "slurm.conf")
    return env


def _ours(path: Path) -> bool:
    """A path this user (or root) owns and no one else may write: in a shared /tmp, another
    user's slurm.conf would take every job of ours to a cluster of theirs."""
    try:
        info = path.stat()
    except OSError:
        return False
    return info.st_uid in (os.getuid(), 0) and not info.st_mode & 0o022


def slurm_command(words: list[str], what: str) -> str:
    """Run a Slurm client command; its output, or SlurmError with Slurm's own message."""
    try:
        done = subprocess.run(
            words, capture_output=True, text=True, env=slurm_environ(), timeout=60
        )
    except FileNotFoundError:
        raise SlurmError(
            f"{words[0]} not found: run this on a Slurm login node (or start "
            "scripts/slurm-dev-cluster.sh up)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{words[0]} did not answer in 60 s ({what})") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        said = lines[-1] if lines else f"exit {done.returncode}"
        raise SlurmError(f"{what}: {words[0]} failed: {said}")
    return done.stdout


def _check(request: SlurmRequest) -> None:
    if request.nodes is not None and request.nodelist:
        raise errors.UsageError("give --nodes N or --nodelist LIST, not both")
    if request.nodes is not None and request.nodes < 1:
        raise errors.UsageError(f"--nodes {request.nodes}: must be at least 1")
    if request.local_dir is not None and not request.local_dir.is_absolute():
        raise errors.UsageError(
            f"--local-dir {request.local_dir}: give an absolute path "
            "(a folder on each node's own disk, e.g. /tmp)"
        )
    if request.partition is not None and not PARTITION_RE.match(request.partition):
        raise errors.UsageError(
            f"--partition {request.partition!r}: give Slurm partition names, e.g. gpu or gpu,long"
        )
    out = str(request.outdir.resolve())
    if any(c in out for c in " \t\n\r#%"):
        raise errors.UsageError(
            f"-o {out!r}: the batch script's #SBATCH --output cannot hold "
            "spaces, '#' or '%': choose a folder without them"
        )
    if any(c in str(request.profile) for c in "\n\r"):
        raise errors.UsageError(f"profile {request.profile!r}: not a profile name or file")
    if request.nodelist and not NODELIST_RE.match(request.nodelist):
        raise errors.UsageError(
            f"--nodelist {request.nodelist!r}: give Slurm node names such as node[1-4],gpu7"
        )
    if request.gpus_per_node is not None and request.gpus_per_node < 1:
        raise errors.UsageError(f"--gpus-per-node {request.gpus_per_node}: must be at least 1")
    if request.time is not None and not TIME_RE.match(request.time):
        raise errors.UsageError(
            f"--time {request.time!r}: use Slurm's forms, e.g. 90, 2:00:00 or 1-00:00:00"
        )
    if request.repeat < 1:
        raise errors.UsageError(f"--repeat {request.repeat}: must be at least 1")
    for arg in request.sbatch_args:  # each becomes one #SBATCH line of the script
        if not arg.startswith("-") or any(c in arg for c in "\n\r\0"):
            raise errors.UsageError(
                f"--sbatch-arg {arg!r}: give one sbatch option, e.g. --sbatch-arg=--account=lab"
            )
    if request.kind == "scaling":
        if request.nodelist or request.each_node:
            raise errors.UsageError(
                "slurm scaling takes --nodes 1,2,4,... (one allocation of "
                "the largest count), not --nodelist or --each-node"
            )
        if not request.node_counts or min(request.node_counts) < 1:
            raise errors.UsageError("slurm scaling: give --nodes as node counts, e.g. 1,2,4,8")
    elif request.nodes is None and not request.nodelist:
        raise errors.UsageError("slurm fleet: give --nodes N or --nodelist LIST")


def _per_node_devices(request: SlurmRequest) -> list[devices.Device]:
    """The devices each node will run (for the names its results take). Without --devices
    or --gpus-per-node, a node finds its own (its GPUs, else one CPU slice): the names its
    run manifest plans then replace this guess (milarun.slurm.follow.check)."""
    if request.devices is not None:
        return devices.parse_device_spec(request.devices)
    count = request.gpus_per_node or 1
    kind = devices.GPU_KIND if request.gpus_per_node else devices.CPU_KIND
    return [devices.Device(kind, str(i), count) for i in range(count)]


def expected_results(request: SlurmRequest, selected: list[profile.Job]) -> dict[str, str]:
    """Fleet: the names each node records; scaling: the names the head node records; each
    with its test function."""
    devs = _per_node_devices(request)
    if request.kind == "fleet":
        names = suite.expected_tests(selected, devs)
        return {
            name: job.experiment
            for name in sorted(names)
            for job in selected
            if name == job.fullname or name.rpartition(".")[0] == job.fullname
        }
    return {
        f"{j.fullname}.{k * len(devs)}": j.experiment
        for j in selected
        if j.partition == "gpu-progression"
        for k in sorted(set(request.node_counts))
    }


def each_node_list(request: SlurmRequest) -> list[str]:
    """--each-node: the nodes to submit one job to (the list, or N nodes sinfo shows up)."""
    if request.nodelist:
        return expand_nodelist(request.nodelist)
    words = ["sinfo", "-h", "-N", "-t", "idle,mixed,allocated,completing", "-o", "%N"]
    if request.partition:
        words += ["-p", request.partition]
    up = sorted(set(slurm_command(words, "listing the nodes").split()))
    if len(up) < (request.nodes or 0):
        raise SlurmError(
            f"--each-node --nodes {request.nodes}: only {len(up)} node(s) are "
            f"up ({', '.join(up) or 'none'}); give --nodelist"
        )
    return up[: request.nodes]


def expand_nodelist(nodelist: str) -> list[str]:
    """node[1-3],gpu7 -> node1 node2 node3 gpu7, by Slurm itself."""
    return slurm_command(
        ["scontrol", "show", "hostnames", nodelist], f"expanding {nodelist}"
    ).split()


@dataclass(frozen=True)
class Submitted:
    script: Path
    text: str
    job_ids: list[str]
    record: Path | None
    commands: list[list[str]]


def submit(request: SlurmRequest, dry_run: bool = False) -> Submitted:
    """Write the script into <out>/slurm/ and submit it (dry_run: only render it)."""
    _check(request)
    prof = profile.load_profile(request.profile)
    selected = prof.select(list(request.names), list(request.tags))
    expected = expected_results(request, selected)
    if not expected:
        raise errors.UsageError(
            f"slurm {request.kind}: the selection of {prof.name} has no "
            "job to run"
            + (" (scaling needs a gpu-progression job)" if request.kind == "scaling" else "")
        )
    folder = request.outdir / SLURM_FOLDER
    stamp = results.utc_stamp()
    script = folder / f"{request.kind}.{stamp}.sbatch"
    text = render_script(request, script)
    if dry_run:  # asks Slurm nothing
        each = ["--nodelist=<node>", "--job-name=milarun-fleet-<node>"]
        command = ["sbatch", "--parsable", *(each if request.each_node else []), str(script)]
        return Submitted(
            script,
            text,
            [],
            None,
            [
                command
                + (
                    [f"# once per node of {request.nodelist or f'{request.nodes} nodes'}"]
                    if request.each_node
                    else []
                )
            ],
        )
    nodes = each_node_list(request) if request.each_node else [None]
    commands = [
        ["sbatch", "--parsable"]
        + ([f"--nodelist={n}", f"--job-name=milarun-fleet-{n}"] if n else [])
        + [str(script)]
        for n in nodes
    ]
    check_outdir(request.outdir)
    folder.mkdir(parents=True, exist_ok=True)
    results.write_text_atomic(script, text)
    script.chmod(0o755)
    record = Submission(
        request.kind,
        prof.name,
        str(script),
        sorted(expected),
        expected,
        submitted_at=_dt.datetime.now().timestamp(),
    )
    path = record.save(folder, stamp)  # before the first job can start and look for it
    for node, command in zip(nodes, commands):
        try:
            answer = slurm_command(command, f"submitting {script}")
        except SlurmError as err:
            if not record.job_ids:  # nothing submitted: nothing to follow
                path.unlink(missing_ok=True)
                raise
            raise SlurmError(
                f"{err} (already submitted: job(s) {', '.join(record.job_ids)}; "
                f"`milarun slurm wait {request.outdir}` follows them)"
            ) from None
        record.job_ids.append(answer.strip().split(";")[0])
        record.nodelists.append(node or request.nodelist)
        record.save(folder, stamp)
    return Submitted(script, text, record.job_ids, path, commands)


def load_submissions(outdir: Path, job: str | None = None) -> list[tuple[Path, Submission]]:
    """The submissions recorded in <out>/slurm/ (those of one job id when given)."""
    found = []
    for path in (outdir / SLURM_FOLDER).glob(f"*{SUBMISSION_SUFFIX}"):
        try:
            data = results.read_json(path)
            record = Submission(**data)
        except (errors.InputError, TypeError):
            continue
        if job is None or job in record.job_ids:
            found.append((path, record))
    return sorted(found, key=lambda item: item[1].submitted_at or 0)  # the latest last


def describe(submitted: Submitted) -> list[str]:
    """The lines that say what was submitted."""
    lines = [f"batch script: {submitted.script}"]
    for job, command in zip(submitted.job_ids, submitted.commands):
        node = next((w.split("=", 1)[1] for w in command if w.startswith("--nodelist=")), None)
        lines.append(f"submitted job {job}" + (f" (node {node})" if node else ""))
    return lines
