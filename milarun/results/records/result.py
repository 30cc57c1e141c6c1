"""The one builder of a result (ResultRecord): its own fields and its nested records."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from milarun.machine import slurmenv, sysinfo
from milarun.machine.gpuids import GpuIdentity
from milarun.machine.slurmenv import SlurmBlock
from milarun.results.records.base import write_record
from milarun.results.records.energy import Efficiency, Energy, NodeEnergy
from milarun.results.records.quality import Diagnostics, Startup
from milarun.results.records.run import Call, Dataset, Failure, Isolation
from milarun.results.schema import FORMAT_VERSION, LAUNCH_KEYS, OWN_KEYS, RECORD_KEYS, WRITTEN_BY

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


def _dicts(records: Mapping[str, Record] | None) -> dict[str, Any] | None:
    return None if records is None else {k: v.to_dict() for k, v in records.items()}


@dataclass(frozen=True)
class ResultRecord:
    """One result, whoever writes it: the test's process (runner) or the harness (launch).

    Every record has every key of results.RECORD_KEYS, null or empty where the writer cannot know
    the value; ``launch`` holds what `milarun jobs` passed with --extra (job, suite, repeat,
    prepare, world_size, and any other field), added last so the file's key order stays
    the legacy one.
    """

    name: str
    job_id: str
    dataroot: str
    outdir: str
    call: Call
    failure: Failure | None
    error: str | None
    device: str
    devices: list[str]
    gpu: str | None
    device_count: int
    environ: dict[str, str]
    isolation: Isolation | None
    returncode: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    timings: Mapping[str, Record] = field(default_factory=dict)
    gpu_monitor: dict[str, Any] | None = None
    cpu_monitor: dict[str, Any] | None = None
    synthetic_data: bool | None = None
    dataset: Dataset | None = None  # the data it read
    rerun_of: str | None = None
    startup: Startup | None = None
    diagnostics: Mapping[str, Diagnostics] | None = None
    efficiency: Efficiency | None = None
    energy: Energy | None = None  # over the steady window
    # The BMC's readings (milarun.machine.bmc) and the node's energy over the steady window
    # (milarun.measure.nodepower.NodeEnergy): null where no BMC is configured.
    node_monitor: dict[str, Any] | None = None
    node_energy: NodeEnergy | None = None
    # Each GPU of the instance: the id the operator named, NVML's UUID and PCI bus id
    # (machine.gpuids); empty (null in the file) on a CPU slice.
    gpu_identity: tuple[GpuIdentity, ...] = ()
    launch: Mapping[str, Any] = field(default_factory=dict)
    # Where it ran: the Slurm node (else the host) and the Slurm job and step, if any;
    # a distributed run: every rank's {rank, node, host, device}.
    node: str = field(default_factory=slurmenv.node_name)
    slurm: SlurmBlock | None = field(default_factory=slurmenv.slurm_block)
    ranks: tuple[Mapping[str, Any], ...] = ()
    signal: str | None = None
    log: str | None = None
    written_by: str | None = None
    system: dict[str, Any] = field(default_factory=sysinfo.system_record)
    hostname: str = field(default_factory=socket.gethostname)
    milarun_version: str = field(default_factory=sysinfo.milarun_version)
    finished_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        clashing = sorted(set(self.launch) & OWN_KEYS)
        if clashing:
            raise ValueError(f"launch field '{clashing[0]}' would overwrite a result field")

    @property
    def success(self) -> bool:
        return self.failure is None

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object (the only place a result is serialised): the keys of
        results.RECORD_KEYS, the one declaration of the schema, in its order; a key
        declared there and given no value here (or the reverse) fails on the first write."""
        values = {
            "name": self.name,
            "job_id": self.job_id,
            "dataroot": self.dataroot,
            "outdir": self.outdir,
            "job": self.launch.get("job"),
            "device": self.device,
            "devices": list(self.devices),
            "call": self.call.to_dict(),
            "success": self.success,
            "error": self.error,
            "hostname": self.hostname,
            "gpu": self.gpu,
            "device_count": self.device_count,
            "environ": self.environ,
            "metrics": self.metrics,
            "timings": _dicts(self.timings),
            "gpu_monitor": self.gpu_monitor,
            "cpu_monitor": self.cpu_monitor,
            "milarun_version": self.milarun_version,
            "system": self.system,
            "isolation": self.isolation.to_dict() if self.isolation else None,
            "failure": self.failure.to_dict() if self.failure else None,
            "returncode": self.returncode,
            "synthetic_data": self.synthetic_data,
            "dataset": self.dataset.to_dict() if self.dataset is not None else None,
            "rerun_of": self.rerun_of,
            "startup": self.startup.to_dict() if self.startup else None,
            "diagnostics": _dicts(self.diagnostics),
            "efficiency": self.efficiency.to_dict() if self.efficiency else None,
            "energy": self.energy.to_dict() if self.energy else None,
            "node_monitor": self.node_monitor,
            "node_energy": self.node_energy.to_dict() if self.node_energy else None,
            "gpu_identity": [g.to_dict() for g in self.gpu_identity] or None,
            "node": self.node,
            "slurm": write_record(self.slurm) if self.slurm else None,
            "ranks": [dict(r) for r in self.ranks] or None,
            "format_version": FORMAT_VERSION,
            "signal": self.signal,
            "log": self.log,
            "finished_at": self.finished_at,
            **{key: self.launch.get(key) for key in LAUNCH_KEYS},
        }
        if values.keys() != set(RECORD_KEYS):
            raise AssertionError(
                f"result keys differ from the schema: {sorted(values.keys() ^ set(RECORD_KEYS))}"
            )
        return {
            **{key: values[key] for key in RECORD_KEYS},
            **{k: v for k, v in self.launch.items() if k not in RECORD_KEYS},
            **({WRITTEN_BY: self.written_by} if self.written_by else {}),
        }
