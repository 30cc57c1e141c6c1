"""Where a process runs inside Slurm, read from the variables slurmd sets (no Slurm call).

A result records its ``node`` (the Slurm node name in a job, else the host name: several
virtual nodes may share one host) and a ``slurm`` block (job, step, node list); ``milarun
jobs`` run as a Slurm task writes under ``<out>/nodes/<node>/`` so that one folder serves a
whole allocation.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

NODES_FOLDER = "nodes"


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def node_name(environ: Mapping[str, str] | None = None) -> str:
    """The Slurm node this process runs on, or this host's name outside Slurm."""
    return _env(environ).get("SLURMD_NODENAME") or socket.gethostname()


def on_node(environ: Mapping[str, str] | None = None) -> bool:
    """True in a Slurm job's task or batch script (slurmd set the node name)."""
    env = _env(environ)
    return bool(env.get("SLURM_JOB_ID") and env.get("SLURMD_NODENAME"))


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


@dataclass(frozen=True)
class SlurmBlock:
    """A result's ``slurm`` record: the Slurm job, step and node it ran in (results.records
    reads and writes it)."""

    job_id: str | None = None
    step_id: str | None = None
    node: str | None = None
    node_id: int | None = None
    nodelist: str | None = None
    nnodes: int | None = None
    step_nodelist: str | None = None
    job_name: str | None = None
    partition: str | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None
    # What `milarun slurm check` read of a job that wrote no result (its state and exit
    # code); not written where None (results.records.base.OMIT_NONE: that floor is above)
    state: str | None = field(default=None, metadata={"omit_none": True})
    exit_code: str | None = field(default=None, metadata={"omit_none": True})


def slurm_block(environ: Mapping[str, str] | None = None) -> SlurmBlock | None:
    """The result's ``slurm`` record: None outside a Slurm job."""
    env = _env(environ)
    if not env.get("SLURM_JOB_ID"):
        return None
    return SlurmBlock(
        job_id=env.get("SLURM_JOB_ID"),
        # a batch script has no step id: its commands run in the job's "batch" step
        step_id=env.get("SLURM_STEP_ID") or ("batch" if env.get("SLURMD_NODENAME") else None),
        node=env.get("SLURMD_NODENAME"),
        node_id=_int(env.get("SLURM_NODEID")),
        nodelist=env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"),
        nnodes=_int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")),
        step_nodelist=env.get("SLURM_STEP_NODELIST"),
        job_name=env.get("SLURM_JOB_NAME"),
        partition=env.get("SLURM_JOB_PARTITION"),
        array_job_id=env.get("SLURM_ARRAY_JOB_ID"),
        array_task_id=env.get("SLURM_ARRAY_TASK_ID"),
    )


def node_outdir(outdir: Path, environ: Mapping[str, str] | None = None) -> Path:
    """``<out>/nodes/<node>`` for a Slurm task (unless ``out`` already is that folder);
    ``out`` itself elsewhere."""
    if not on_node(environ):
        return outdir
    node = node_name(environ)
    if outdir.name == node and outdir.parent.name == NODES_FOLDER:
        return outdir
    return outdir / NODES_FOLDER / node


def extra_task_on_node(environ: Mapping[str, str] | None = None) -> str | None:
    """Why this Slurm task must not run a suite: a second task on the same node would run
    the same devices twice at once (None when it is the node's only or first task)."""
    env = _env(environ)
    local = env.get("SLURM_LOCALID")
    if on_node(env) and local not in (None, "", "0"):
        return (
            f"this is Slurm task {local} on node {node_name(env)}: run one milarun jobs "
            "per node (srun --ntasks-per-node=1), it runs every device of the node"
        )
    return None
