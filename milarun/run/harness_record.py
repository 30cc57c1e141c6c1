"""The FAIL record the harness writes for an instance that ended without writing its own
(crash, signal, timeout, OOM, interruption): the same record builder as a test's result,
with the end of the instance's log as its error."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from milarun.machine import sysinfo
from milarun.machine.devices import GPU_KIND
from milarun.machine.gpuids import instance_gpus
from milarun.results import records
from milarun.results.schema import HARNESS_WRITER
from milarun.run.plan import Instance, LaunchOptions

LOG_TAIL_LINES = 50
CRASH_SIGNALS = {signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT}


def failure_kind(inst: Instance, oom: bool = False) -> tuple[str, str]:
    """Why an instance ended without writing its own result."""
    code = inst.started_process.returncode
    if oom:
        limit = inst.placement.groups.get("memory") if inst.placement else None
        return "oom", f"killed by the OOM killer of its memory cgroup ({limit})"
    if inst.interrupted:
        return "interrupted", f"stopped on {inst.stopped_by or 'a signal to milarun jobs'}"
    if inst.alarm_sent is not None:
        return "timeout", f"ran past max_duration={inst.job.max_duration:g}s and was killed"
    if code is not None and code < 0:
        sig = signal.Signals(-code)
        if sig in CRASH_SIGNALS:
            return "crash", f"died of {sig.name}"
        return "killed", f"killed by {sig.name}"
    return "crash", f"exited with code {code} without writing a result"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def harness_failure(
    inst: Instance, opts: LaunchOptions, oom: bool = False, failure: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The FAIL result the harness writes for an instance that wrote none; ``failure``
    (kind, message) for one that never started."""
    kind, message = failure or failure_kind(inst, oom)
    code = inst.process.returncode if inst.process is not None else None
    labels = [d.label for d in inst.devices]
    system = sysinfo.system_record()
    gpus = instance_gpus(inst.env)
    on_gpu = inst.devices[0].kind == GPU_KIND
    return records.ResultRecord(
        name=inst.name,
        job_id=inst.job_id,
        dataroot=str(opts.dataroot),
        outdir=str(opts.outdir),
        call=records.Call(inst.job.experiment, (*inst.job.argv(), *opts.args_for(inst.job))),
        failure=records.Failure(kind, message),
        error=log_tail(inst.log_path),
        device=labels[0],
        devices=labels,
        gpu=records.gpu_name(system, [g.id for g in gpus]) if on_gpu else None,
        device_count=sum(d.kind == GPU_KIND for d in inst.devices),
        environ=records.recorded_environ(inst.env),
        isolation=records.Isolation(
            requested=inst.placement.spec if inst.placement else None,
            groups=inst.placement.groups if inst.placement else None,
        ),
        returncode=code,
        signal=signal.Signals(-code).name if code and code < 0 else None,
        log=str(inst.log_path),
        written_by=HARNESS_WRITER,
        system=system,
        gpu_identity=gpus,
        launch={**inst.launch, "job": inst.job.definition, "suite": inst.job.suite},
    ).to_dict()
