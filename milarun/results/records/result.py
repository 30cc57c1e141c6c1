"""The one builder of a result (ResultRecord): its fields are the file's keys, in the file's
order, so that the schema's key lists (RESULT_KEYS, END_KEYS, LAUNCH_KEYS, RECORD_KEYS) and
the type of each field (results.shape) are read off it."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from milarun.machine import slurmenv, sysinfo
from milarun.machine.gpuids import GpuIdentity
from milarun.machine.slurmenv import SlurmBlock
from milarun.results.records.base import written
from milarun.results.records.energy import Efficiency, Energy, NodeEnergy
from milarun.results.records.quality import Diagnostics, Startup
from milarun.results.records.run import Call, Dataset, Failure, Isolation
from milarun.results.schema import FORMAT_VERSION, WRITTEN_BY

# Environment variables worth recording (and restoring on rerun); never the whole
# environment, which may hold secrets.
ENV_PREFIXES = (
    "CUDA_",
    "HIP_",
    "ROCR_",
    "ROCM_",
    "NVIDIA_",
    "NCCL_",
    "ZE_",  # Level Zero's (Intel GPUs): ZE_AFFINITY_MASK
    "OMP_",
    "MKL_",
    "KMP_",
    "ONEDNN_",
    "DNNL_",
    "PYTORCH_",
    "TORCH_",
    "MILARUN_",
    "SLURM_JOB_ID",
    "SLURM_CPUS",
)
# Never kept, whatever the prefix: a credential (MILARUN_BMC_PASSWORD) has no place in a
# result, nor where the BMC is and who logs in (milarun.machine.bmc.config).
SECRET_WORDS = ("PASSWORD", "SECRET", "TOKEN", "CREDENTIAL", "PASSWD", "BMC_ADDRESS", "BMC_USER")
# ... nor how many instances shared the node with this one (measure.nodepower): a rerun of
# it runs alone, and its result's node_energy says how many there were.
NOT_RECORDED = ("MILARUN_NODE_INSTANCES",)


# -- the one builder of a result record ---------------------------------------------------
class Record(Protocol):
    """A measurement value of a result (a ``timings`` entry: records.timings)."""

    def to_dict(self) -> dict[str, Any]: ...


def recorded_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of an environment a result keeps (ENV_PREFIXES), sorted."""
    return {
        k: v
        for k, v in sorted(environ.items())
        if k.startswith(ENV_PREFIXES)
        and k not in NOT_RECORDED
        and not any(w in k.upper() for w in SECRET_WORDS)
    }


def gpu_name(system: Mapping[str, Any], visible: list[str]) -> str | None:
    """The name of the first visible GPU in a system record (else of its first GPU)."""
    gpus = system.get("gpus") or []
    for gpu in gpus:
        if visible and str(gpu.get("index")) == visible[0]:
            return gpu.get("name")
    return gpus[0].get("name") if gpus else None


# Metadata of a ResultRecord field: which part of the file's keys it is (PART: END, how the
# process ended; LAUNCH, what `milarun jobs` passed, taken from ``launch``; NOT_A_KEY: not
# written as a key of its own); NULL_IF_EMPTY: an empty list is written null; TYPED: a
# reader computes with it, so a file whose value has another type is skipped (results.shape),
# the value naming the type where its annotation does not say it all.
PART, END, LAUNCH, NOT_A_KEY = "part", "end", "launch", "not-a-key"
NULL_IF_EMPTY = "null_if_empty"
TYPED = "typed"
_TYPED = {TYPED: True}


def _end() -> Any:
    return {PART: END}


@dataclass(frozen=True, kw_only=True)
class ResultRecord:
    """One result, whoever writes it: the test's process (runner) or the harness (launch).

    Every record has every key of RECORD_KEYS (its fields), null or empty where the writer
    cannot know the value; ``launch`` holds what `milarun jobs` passed with --extra (job,
    suite, repeat, prepare, world_size, and any other field): its own keys are written at
    their place, any other after them, so the file's key order stays the legacy one.
    """

    name: str
    job_id: str = field(metadata={TYPED: "a string or a number"})
    dataroot: str = field(metadata={TYPED: "a path"})
    outdir: str
    job: Any = field(init=False, default=None)  # the profile's job: from ``launch``
    device: str = field(metadata=_TYPED)
    devices: list[str] = field(metadata=_TYPED)
    call: Call = field(metadata=_TYPED)
    success: bool = field(init=False, default=False)  # no failure
    error: str | None = field(metadata=_TYPED)
    hostname: str = field(default_factory=socket.gethostname)
    gpu: str | None
    device_count: int
    environ: dict[str, str] = field(metadata=_TYPED)
    metrics: dict[str, float] = field(default_factory=dict, metadata=_TYPED)
    timings: Mapping[str, Record] = field(default_factory=dict, metadata=_TYPED)
    gpu_monitor: dict[str, Any] | None = field(default=None, metadata=_TYPED)
    cpu_monitor: dict[str, Any] | None = field(default=None, metadata=_TYPED)
    milarun_version: str = field(default_factory=sysinfo.milarun_version)
    system: dict[str, Any] = field(default_factory=sysinfo.system_record, metadata=_TYPED)
    isolation: Isolation | None = field(metadata=_TYPED)
    failure: Failure | None = field(metadata=_TYPED)
    returncode: int | None
    synthetic_data: bool | None = None
    dataset: Dataset | None = field(default=None, metadata=_TYPED)  # the data it read
    rerun_of: str | None = None
    startup: Startup | None = field(default=None, metadata=_TYPED)
    diagnostics: Mapping[str, Diagnostics] | None = field(default=None, metadata=_TYPED)
    efficiency: Efficiency | None = field(default=None, metadata=_TYPED)
    energy: Energy | None = field(default=None, metadata=_TYPED)  # over the steady window
    # The BMC's readings (milarun.machine.bmc) and the node's energy over the steady window
    # (milarun.measure.nodepower): null where no BMC is configured.
    node_monitor: dict[str, Any] | None = field(default=None, metadata=_TYPED)
    node_energy: NodeEnergy | None = field(default=None, metadata=_TYPED)
    # Each GPU of the instance: the id the operator named, NVML's UUID and PCI bus id
    # (machine.gpuids); empty (null in the file) on a CPU slice.
    gpu_identity: tuple[GpuIdentity, ...] = field(
        default=(), metadata={TYPED: True, NULL_IF_EMPTY: True}
    )
    # Where it ran: the Slurm node (else the host) and the Slurm job and step, if any;
    # a distributed run: every rank's {rank, node, host, device}.
    node: str = field(default_factory=slurmenv.node_name, metadata=_TYPED)
    slurm: SlurmBlock | None = field(default_factory=slurmenv.slurm_block, metadata=_TYPED)
    ranks: tuple[Mapping[str, Any], ...] = field(
        default=(), metadata={TYPED: True, NULL_IF_EMPTY: True}
    )
    format_version: int = field(init=False, default=FORMAT_VERSION)
    # How the process ended: a signal and the log only the harness sees, and when.
    signal: str | None = field(default=None, metadata=_end())
    log: str | None = field(default=None, metadata=_end())
    finished_at: float = field(default_factory=time.time, metadata=_end())
    # How `milarun jobs` launched the instance (its --extra): null in a plain `milarun run`.
    suite: Any = field(init=False, default=None, metadata={PART: LAUNCH})
    repeat: Any = field(init=False, default=None, metadata={PART: LAUNCH})
    prepare: Any = field(init=False, default=None, metadata={PART: LAUNCH})
    world_size: Any = field(init=False, default=None, metadata={PART: LAUNCH})
    launch: Mapping[str, Any] = field(default_factory=dict, metadata={PART: NOT_A_KEY})
    # Who wrote it where its test could not (the harness); only such a record carries it,
    # its presence is the marker (results.WRITTEN_BY)
    written_by: str | None = field(default=None, metadata={PART: NOT_A_KEY})

    def __post_init__(self) -> None:
        clashing = sorted(set(self.launch) & OWN_KEYS)
        if clashing:
            raise ValueError(f"launch field '{clashing[0]}' would overwrite a result field")
        object.__setattr__(self, "success", self.failure is None)
        for key in ("job", *LAUNCH_KEYS):
            object.__setattr__(self, key, self.launch.get(key))

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object (the only place a result is serialised): RECORD_KEYS in
        their order, then ``launch``'s other fields, then ``written_by`` where set."""
        out = {}
        for spec in _KEYED:
            value = written(getattr(self, spec.name))
            out[spec.name] = None if value == [] and spec.metadata.get(NULL_IF_EMPTY) else value
        return {
            **out,
            **{k: v for k, v in self.launch.items() if k not in out},
            **({WRITTEN_BY: self.written_by} if self.written_by else {}),
        }


_KEYED = tuple(f for f in fields(ResultRecord) if f.metadata.get(PART) != NOT_A_KEY)


def _part(part: str | None) -> tuple[str, ...]:
    return tuple(f.name for f in _KEYED if f.metadata.get(PART) == part)


# Keys every result carries (legacy keys first, then the ones milarun added).
RESULT_KEYS = _part(None)
END_KEYS = _part(END)
LAUNCH_KEYS = _part(LAUNCH)
# Every key of every record, in file order. ``written_by`` is not one of them: only a record
# the harness wrote carries it, its presence is the marker.
RECORD_KEYS = tuple(f.name for f in _KEYED)
# The keys a launch's --extra may not set (it may set "job", the launch keys and others).
OWN_KEYS = frozenset(RECORD_KEYS + (WRITTEN_BY,)) - {"job", *LAUNCH_KEYS}
