"""What `milarun slurm fleet|scaling|doctor` is asked for: the request, and the forms its
Slurm values must have."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SLURM_FOLDER = "slurm"
SUBMISSION_SUFFIX = ".submission"  # JSON, but not a result: not *.json
NODELIST_RE = re.compile(r"^[A-Za-z0-9_.\-\[\],]+$")
PARTITION_RE = re.compile(r"^[A-Za-z0-9_.\-,]+$")
TIME_RE = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")


@dataclass(frozen=True)
class SlurmRequest:
    """What `milarun slurm fleet|scaling` was asked for (paths already resolved)."""

    kind: str  # "fleet" or "scaling"
    profile: str
    outdir: Path
    dataroot: Path | None = None  # None: each node's own default
    nodes: int | None = None
    nodelist: str | None = None
    node_counts: tuple[int, ...] = ()  # scaling: 1,2,4,8
    each_node: bool = False
    partition: str | None = None
    gpus_per_node: int | None = None
    time: str | None = None
    sbatch_args: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    repeat: int = 1
    devices: str | None = None
    use_cgexec: bool = True
    user_args: tuple[str, ...] = ()
    local_dir: Path | None = None  # fleet: write on node-local disk, gather at the end
