"""The instances of a suite run, before any starts: their commands, devices, environment,
student groups and log files; ``prepare`` commands; a multi-node run's rendezvous."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from milarun import errors
from milarun.errors import LaunchError
from milarun.machine import isolation
from milarun.machine.devices import CPU_KIND, Device, instance_environ, launch_environ
from milarun.run.profile import Job
from milarun.run.warm import ForkedProcess

GRACE_PERIOD = 10.0
log = logging.getLogger("milarun.run.launch")


@dataclass
class Instance:
    job: Job
    job_id: str
    devices: list[Device]
    command: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen | ForkedProcess | None = None
    started: float = 0.0
    wall_started: float = 0.0
    placement: isolation.Placement | None = None
    oom_before: int | None = None
    alarm_sent: float | None = None
    killed: bool = False
    interrupted: bool = False
    result_path: Path | None = None
    unwritten: str | None = None  # why its result could not be written (a full disk)
    result: dict[str, Any] = field(default_factory=dict)
    stamp: str = ""  # of its result file's name, chosen here and given to the instance
    stopped_by: str | None = None  # why the supervisor stopped it (a signal, an error)
    fullname: str | None = None  # result name when it is not the job's (scaling: .<k>)
    # A node other than the head of a multi-node run: rank 0, on the head, writes the result;
    # this one is recorded only when it fails.
    recorded_on_head: bool = False
    # What `jobs` launched it with (job, suite, repeat, prepare[, world_size]): handed to the
    # instance as --extra, and kept here for the record the harness writes when it fails.
    launch: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.fullname or self.job.fullname

    @property
    def tag(self) -> str:
        return f"{self.name} J{self.job_id} {','.join(d.label for d in self.devices)}"

    @property
    def started_process(self) -> subprocess.Popen | ForkedProcess:
        """The process of an instance that has started (the supervisor's view of it)."""
        if self.process is None:
            raise RuntimeError(f"{self.tag} has not started")
        return self.process


@dataclass
class LaunchOptions:
    outdir: Path
    dataroot: Path
    user_args: list[str] = field(default_factory=list)
    use_cgexec: bool = True
    grace: float = GRACE_PERIOD
    out: TextIO = sys.stdout
    hierarchies: dict[str, isolation.Hierarchy] = field(default_factory=dict)
    verbose: bool = False  # stream every instance's output
    # fork instances from a warm process that imported torch once (run/warm.py), else
    # start each as a new interpreter
    warm_start: bool = True
    progress_interval: float = 10.0
    unisolated_warned: set[str] = field(default_factory=set)
    prepare_warned: set[str] = field(default_factory=set)
    rendezvous: Rendezvous | None = None  # a multi-node scaling run: this node's part
    # job fullname -> its share of user_args (run.arguments: the flags it takes); a job not
    # in it gets them all
    user_args_by_job: dict[str, list[str]] = field(default_factory=dict)

    def args_for(self, job: Job) -> list[str]:
        """The arguments after ``--`` that ``job`` is given."""
        return list(self.user_args_by_job.get(job.fullname, self.user_args))


@dataclass(frozen=True)
class Rendezvous:
    """This node's part of a multi-node torchrun (static rendezvous): ``nnodes`` nodes, this
    one ``node_rank``, rank 0's node at ``master_addr:master_port``."""

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int

    @classmethod
    def parse(
        cls, nnodes: int, master: str, node_rank: int | None, environ: dict[str, str] | None = None
    ) -> Rendezvous:
        """From ``--nnodes K --master ADDR:PORT [--node-rank R]``; R defaults to Slurm's
        node index in the step (SLURM_NODEID)."""
        env = os.environ if environ is None else environ
        addr, _, port = master.rpartition(":")
        if not addr or not port.isdigit() or not 0 < int(port) < 65536:
            raise LaunchError(
                f"--master {master}: give the head node as ADDR:PORT, e.g. node1:29500"
            )
        if nnodes < 1:
            raise LaunchError(f"--nnodes {nnodes}: must be at least 1")
        if node_rank is None:
            if not (env.get("SLURM_NODEID") or "").isdigit():
                raise LaunchError(
                    "--nnodes: give --node-rank R (0 on the head node), or run "
                    "under srun, which sets SLURM_NODEID"
                )
            node_rank = int(env["SLURM_NODEID"])
        if not 0 <= node_rank < nnodes:
            raise LaunchError(
                f"--node-rank {node_rank}: must be 0 to {nnodes - 1} for --nnodes {nnodes}"
            )
        return cls(nnodes, node_rank, addr, int(port))


def check_jobs(jobs: list[Job], devices: list[Device], opts: LaunchOptions) -> None:
    """Refuse up front what cannot run, before any job starts."""
    for job in jobs:
        if job.partition == "gpu-progression":
            continue  # k ranks span k students: runs without per-student groups
        for device in devices:
            _placement(job, device, opts)


def _placement(job: Job, device: Device, opts: LaunchOptions) -> isolation.Placement | None:
    """The student groups of an instance, or None when the job runs without them."""
    if not job.cgroup or not opts.use_cgexec:
        return None
    try:
        return isolation.placement(job.cgroup, device.id, opts.hierarchies)
    except errors.IsolationError as err:
        if not job.cgroup_optional:
            raise errors.IsolationError(f"job {job.fullname}: {err}") from err
        if not opts.unisolated_warned:  # once a run: every job meets the same missing groups
            opts.unisolated_warned.add(job.fullname)
            log.warning(
                "this run's jobs run WITHOUT student isolation (each result records the "
                "isolation it got): %s",
                err,
            )
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_command(
    job: Job, name: str, job_id: str, extra: dict[str, Any], opts: LaunchOptions
) -> list[str]:
    """The ``milarun run`` words of one instance (profile args first, the user's last)."""
    return [
        "-m",
        "milarun",
        "run",
        job.experiment,
        "--experiment-name",
        name,
        "--job-id",
        job_id,
        "-o",
        str(opts.outdir),
        "-d",
        str(opts.dataroot),
        "--extra",
        json.dumps(extra),
        "--",
        *job.argv(),
        *opts.args_for(job),
    ]


def progression_sizes(devices: list[Device], rdzv: Any) -> list[tuple[int, int]]:
    """gpu-progression's rounds as (ranks on this node, world size): k = 1..N on one node;
    on nnodes nodes (a rendezvous), the one round of N per node."""
    if rdzv:
        return [(len(devices), len(devices) * rdzv.nnodes)]
    return [(k, k) for k in range(1, len(devices) + 1)]


def instance_job_id(job: Job, repeat: int, group: list[Device]) -> str:
    """``<repeat>.<device id>`` for a per-gpu instance, ``<repeat>`` otherwise."""
    return f"{repeat}.{group[0].id}" if job.partition == "per-gpu" else str(repeat)


def planned_instances(
    jobs: list[Job], devices: list[Device], repeat: int, rdzv: Any = None
) -> list[tuple[str, str]]:
    """Every (result name, job id) that running ``jobs`` ``repeat`` times on ``devices``
    will record, in the order they run: what a run manifest plans."""
    planned = []
    for r in range(repeat):
        for job in jobs:
            if job.partition == "gpu-progression":
                planned += [
                    (f"{job.fullname}.{w}", str(r)) for _, w in progression_sizes(devices, rdzv)
                ]
            else:
                groups = [[d] for d in devices] if job.partition == "per-gpu" else [devices]
                planned += [(job.fullname, instance_job_id(job, r, g)) for g in groups]
    return planned


def plan_progression(
    job: Job,
    repeat: int,
    devices: list[Device],
    opts: LaunchOptions,
    prepared: list[dict[str, Any]] | None = None,
) -> list[list[Instance]]:
    """gpu-progression: for k = 1..N, one torchrun job of k ranks named <suite>.<test>.<k>;
    in a multi-node run (opts.rendezvous), this node's part of the one job of nnodes x N
    ranks, named by its world size."""
    rdzv = opts.rendezvous
    rounds = []
    for k, world in progression_sizes(devices, rdzv):
        group = devices[:k]
        name = f"{job.fullname}.{world}"
        extra = {
            "job": job.definition,
            "suite": job.suite,
            "repeat": repeat,
            "world_size": world,
            "prepare": prepared or [],
        }
        # each round its own port: a node that starts round r+1 early must not reach the
        # head's round-r store, still closing
        where = (
            [
                "--nnodes",
                str(rdzv.nnodes),
                "--node-rank",
                str(rdzv.node_rank),
                "--master-addr",
                rdzv.master_addr,
                "--master-port",
                str(rdzv.master_port + repeat),
            ]
            if rdzv
            else ["--nnodes", "1", "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
        )
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            *where,
            "--nproc-per-node",
            str(k),
            *_run_command(job, name, str(repeat), extra, opts),
        ]
        env = launch_environ(group)  # without the operator's leftover rank variables
        if group[0].kind == CPU_KIND and "OMP_NUM_THREADS" not in os.environ:
            # each rank gets one slice's share of the cores, not the whole group's
            env["OMP_NUM_THREADS"] = instance_environ(group[:1])["OMP_NUM_THREADS"]
        log_path = opts.outdir / "logs" / f"{name}.J{repeat}.log"
        rounds.append(
            [
                Instance(
                    job,
                    str(repeat),
                    group,
                    command,
                    env,
                    log_path,
                    fullname=name,
                    launch=extra,
                    recorded_on_head=bool(rdzv and rdzv.node_rank > 0),
                )
            ]
        )
    return rounds


def plan_instances(
    job: Job,
    repeat: int,
    devices: list[Device],
    opts: LaunchOptions,
    prepared: list[dict[str, Any]] | None = None,
) -> list[Instance]:
    """per-gpu: one instance per device; normal: one instance on every device."""
    groups = [[d] for d in devices] if job.partition == "per-gpu" else [devices]
    instances = []
    for group in groups:
        job_id = instance_job_id(job, repeat, group)
        extra = {
            "job": job.definition,
            "suite": job.suite,
            "repeat": repeat,
            "prepare": prepared or [],
        }
        command = [sys.executable, *_run_command(job, job.fullname, job_id, extra, opts)]
        env = launch_environ(group)  # without the operator's leftover rank variables
        # the instances that share this node's power at once (measure.nodepower)
        env["MILARUN_NODE_INSTANCES"] = str(len(groups))
        place = _placement(job, group[0], opts)
        if place is not None:
            env["MILARUN_CGROUP"] = place.spec
        log_path = opts.outdir / "logs" / f"{job.fullname}.J{job_id}.log"
        instances.append(
            Instance(job, job_id, group, command, env, log_path, placement=place, launch=extra)
        )
    return instances


def exec_prefix(job: Job, warned: set[str]) -> list[str]:
    if not job.exec_prefix:
        return []
    if shutil.which(job.exec_prefix[0]):
        return list(job.exec_prefix)
    if job.exec_prefix[0] not in warned:
        warned.add(job.exec_prefix[0])
        log.warning("exec_prefix '%s' is not installed; running without it", job.exec_prefix[0])
    return []
