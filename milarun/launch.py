"""Run a suite: one supervised process per instance, every outcome written to disk.

Each instance is ``milarun run`` in a process group of its own, its output in
``<outdir>/logs/<name>.J<id>.log``. On max_duration the instance gets SIGALRM (it writes a
``timeout`` result itself), then SIGKILL after a grace period. An instance that ends without
a result file gets a FAIL result written here, with the failure kind and its log tail.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

from milarun import devices as devmod
from milarun import isolation, results, sysinfo
from milarun.devices import Device
from milarun.profile import Job
from milarun.progress import ProgressBoard

GRACE_PERIOD = 10.0
POLL_INTERVAL = 0.1
LOG_TAIL_LINES = 50
CRASH_SIGNALS = {signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT}
log = logging.getLogger(__name__)


class LaunchError(RuntimeError):
    pass


class JobsInterrupted(Exception):
    """SIGINT/SIGTERM reached ``milarun jobs``; every child was stopped and recorded."""


@dataclass
class Instance:
    job: Job
    job_id: str
    devices: list[Device]
    command: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen | None = None
    started: float = 0.0
    wall_started: float = 0.0
    placement: isolation.Placement | None = None
    oom_before: int | None = None
    alarm_sent: float | None = None
    killed: bool = False
    interrupted: bool = False
    result_path: Path | None = None
    result: dict[str, Any] = field(default_factory=dict)
    fullname: str | None = None  # result name when it is not the job's (scaling: .<k>)

    @property
    def name(self) -> str:
        return self.fullname or self.job.fullname

    @property
    def tag(self) -> str:
        return f"{self.name} J{self.job_id} {','.join(d.label for d in self.devices)}"


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
    progress_interval: float = 10.0
    unisolated_warned: set[str] = field(default_factory=set)
    prepare_warned: set[str] = field(default_factory=set)


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
    except isolation.IsolationError as err:
        if not job.cgroup_optional:
            raise isolation.IsolationError(f"job {job.fullname}: {err}")
        if job.fullname not in opts.unisolated_warned:
            opts.unisolated_warned.add(job.fullname)
            log.warning("%s runs WITHOUT student isolation: %s", job.fullname, err)
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_command(job: Job, name: str, job_id: str, extra: dict[str, Any],
                 opts: LaunchOptions) -> list[str]:
    """The ``milarun run`` words of one instance (profile args first, the user's last)."""
    return [
        "-m", "milarun", "run", job.experiment, "--experiment-name", name,
        "--job-id", job_id, "-o", str(opts.outdir), "-d", str(opts.dataroot),
        "--extra", json.dumps(extra), "--", *job.argv(), *opts.user_args,
    ]


def plan_progression(job: Job, repeat: int, devices: list[Device], opts: LaunchOptions,
                     prepared: list[dict[str, Any]] | None = None) -> list[list[Instance]]:
    """gpu-progression: for k = 1..N, one torchrun job of k ranks named <suite>.<test>.<k>."""
    rounds = []
    for k in range(1, len(devices) + 1):
        group = devices[:k]
        name = f"{job.fullname}.{k}"
        extra = {"job": job.definition, "suite": job.suite, "repeat": repeat, "world_size": k,
                 "prepare": prepared or []}
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
            "--nproc-per-node", str(k), "--master-addr", "127.0.0.1",
            "--master-port", str(free_port()),
            *_run_command(job, name, str(repeat), extra, opts),
        ]
        env = {**os.environ, **devmod.instance_environ(group)}
        if group[0].kind == devmod.CPU_KIND and "OMP_NUM_THREADS" not in os.environ:
            # each rank gets one slice's share of the cores, not the whole group's
            env["OMP_NUM_THREADS"] = devmod.instance_environ(group[:1])["OMP_NUM_THREADS"]
        log_path = opts.outdir / "logs" / f"{name}.J{repeat}.log"
        inst = Instance(job, str(repeat), group, command, env, log_path, fullname=name)
        rounds.append([inst])
    return rounds


def plan_instances(job: Job, repeat: int, devices: list[Device], opts: LaunchOptions,
                   prepared: list[dict[str, Any]] | None = None) -> list[Instance]:
    """per-gpu: one instance per device; normal: one instance on every device."""
    groups = [[d] for d in devices] if job.partition == "per-gpu" else [devices]
    instances = []
    for group in groups:
        job_id = f"{repeat}.{group[0].id}" if job.partition == "per-gpu" else str(repeat)
        extra = {"job": job.definition, "suite": job.suite, "repeat": repeat,
                 "prepare": prepared or []}
        command = [sys.executable, *_run_command(job, job.fullname, job_id, extra, opts)]
        env = {**os.environ, **devmod.instance_environ(group)}
        place = _placement(job, group[0], opts)
        if place is not None:
            env["MILARUN_CGROUP"] = place.spec
        log_path = opts.outdir / "logs" / f"{job.fullname}.J{job_id}.log"
        instances.append(Instance(job, job_id, group, command, env, log_path, placement=place))
    return instances


def _exec_prefix(job: Job, warned: set[str]) -> list[str]:
    if not job.exec_prefix:
        return []
    if shutil.which(job.exec_prefix[0]):
        return list(job.exec_prefix)
    if job.exec_prefix[0] not in warned:
        warned.add(job.exec_prefix[0])
        log.warning("exec_prefix '%s' is not installed; running without it",
                    job.exec_prefix[0])
    return []


def _prepare(job: Job, opts: LaunchOptions) -> list[dict[str, Any]]:
    """Run the job's prepare commands; a failure is a warning (once per command).

    Returns what ran and how it ended, for the results (e.g. caches not dropped because
    dropping them needs root: no setuid helper is ever used for it).
    """
    outcomes = []
    for command in job.prepare:
        # The command sees the run's data folder and this Python (e.g. to synthesise data:
        # "$MILARUN_PYTHON" -m milarun dataset mnist --synthetic).
        env = {**os.environ, "MILARUN_DATAROOT": str(opts.dataroot),
               "MILARUN_PYTHON": sys.executable}
        done = subprocess.run(command, shell=True, capture_output=True, text=True, env=env)
        outcomes.append({"command": command, "returncode": done.returncode})
        if done.returncode != 0 and command not in opts.prepare_warned:
            opts.prepare_warned.add(command)
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            log.warning("prepare command of %s failed (exit %d, continuing): %s: %s",
                        job.fullname, done.returncode, command, tail[0])
    return outcomes


class Supervisor:
    """Starts instances, enforces deadlines, stops everything on SIGINT/SIGTERM."""

    def __init__(self, opts: LaunchOptions,
                 on_end: Callable[[Instance], None] | None = None):
        self.opts = opts
        self.board = ProgressBoard(opts.out, opts.progress_interval, opts.verbose)
        # by default the board prints each ended instance's done/FAIL line
        self.on_end = on_end or self.board.finished
        self.stop_requested: str | None = None
        self.warned: set[str] = set()

    def _request_stop(self, signum: int, frame: Any) -> None:
        self.stop_requested = signal.Signals(signum).name

    def run_group(self, instances: list[Instance]) -> None:
        """Run instances side by side until each has ended and has a result on disk."""
        previous = {s: signal.signal(s, self._request_stop)
                    for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            for inst in instances:
                if self.stop_requested:
                    break
                self._start(inst)
            running = [i for i in instances if i.process is not None]
            while running:
                if self.stop_requested:
                    self._stop_all(running)
                now = time.monotonic()
                for inst in running:
                    self._enforce_deadline(inst, now)
                    if inst.process.poll() is not None:
                        self._finish(inst)
                running = [i for i in running if not i.result]
                self.board.update(running)
                if running:
                    time.sleep(POLL_INTERVAL)
        finally:
            self.board.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.stop_requested:
            raise JobsInterrupted(self.stop_requested)

    def _start(self, inst: Instance) -> None:
        inst.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = _exec_prefix(inst.job, self.warned) + inst.command
        preexec = None
        if inst.placement is not None:
            command = inst.placement.prefix + command
            if inst.placement.v2_procs:
                procs = inst.placement.v2_procs
                preexec = lambda: isolation.join_v2(procs)  # noqa: E731
            inst.oom_before = isolation.oom_kills(inst.placement.groups,
                                                  self.opts.hierarchies)
        with open(inst.log_path, "ab") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            inst.started = time.monotonic()
            inst.wall_started = time.time()
            # An adaptive run (--min-slices/--ci-target) stops extending before max_duration.
            env = {**inst.env, "MILARUN_DEADLINE": f"{inst.wall_started + 0.9 * inst.job.max_duration:.3f}"}
            inst.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec,
            )
        self.board.say(f"start  {inst.tag}  log: {inst.log_path}")

    def _oom_killed(self, inst: Instance) -> bool:
        if inst.placement is None or inst.oom_before is None:
            return False
        after = isolation.oom_kills(inst.placement.groups, self.opts.hierarchies)
        return after is not None and after > inst.oom_before

    def _signal_group(self, inst: Instance, sig: int) -> None:
        try:
            os.killpg(inst.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _enforce_deadline(self, inst: Instance, now: float) -> None:
        elapsed = now - inst.started
        if inst.alarm_sent is None and elapsed > inst.job.max_duration:
            inst.alarm_sent = now
            try:  # the test process turns SIGALRM into a 'timeout' result of its own
                inst.process.send_signal(signal.SIGALRM)
            except ProcessLookupError:
                pass
        elif inst.alarm_sent is not None and not inst.killed \
                and now - inst.alarm_sent > self.opts.grace:
            inst.killed = True
            self._signal_group(inst, signal.SIGKILL)

    def _stop_all(self, running: list[Instance]) -> None:
        for inst in running:
            if not inst.interrupted:
                inst.interrupted = True
                self._signal_group(inst, signal.SIGTERM)
        deadline = time.monotonic() + self.opts.grace
        while time.monotonic() < deadline and any(i.process.poll() is None for i in running):
            time.sleep(POLL_INTERVAL)
        for inst in running:
            if inst.process.poll() is None:
                inst.killed = True
                self._signal_group(inst, signal.SIGKILL)
            inst.process.wait()

    def _finish(self, inst: Instance) -> None:
        self.board.read([inst])  # the last lines of its output (no redraw of the table)
        # Reap whatever the test left behind in its group (loader workers, ...).
        self._signal_group(inst, signal.SIGKILL)
        found = results.find_instance_results(
            self.opts.outdir, inst.name, inst.job_id, since=inst.wall_started - 1)
        if found:
            inst.result_path = found[-1]
            try:
                inst.result = results.load_result(found[-1])
            except ValueError as err:
                inst.result = {"success": False, "failure": {"kind": "crash",
                                                             "message": str(err)}}
        else:
            inst.result = harness_failure(inst, self.opts, self._oom_killed(inst))
            stamp = results.utc_stamp(inst.wall_started)
            inst.result_path = results.write_result(self.opts.outdir, inst.result, stamp)
        self.on_end(inst)


def failure_kind(inst: Instance, oom: bool = False) -> tuple[str, str]:
    """Why an instance ended without writing its own result."""
    code = inst.process.returncode
    if oom:
        limit = inst.placement.groups.get("memory") if inst.placement else None
        return "oom", f"killed by the OOM killer of its memory cgroup ({limit})"
    if inst.interrupted:
        return "interrupted", "stopped by SIGINT/SIGTERM to milarun jobs"
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


def harness_failure(inst: Instance, opts: LaunchOptions, oom: bool = False
                    ) -> dict[str, Any]:
    """The FAIL result the harness writes for an instance that wrote none."""
    kind, message = failure_kind(inst, oom)
    code = inst.process.returncode
    labels = [d.label for d in inst.devices]
    words = inst.command
    # What the instance was launched with (job, suite, repeat, prepare, world_size): the
    # --extra its own record would have carried.
    launched = json.loads(words[words.index("--extra") + 1]) if "--extra" in words else {}
    system = sysinfo.system_record()
    visible = [x for x in inst.env.get("CUDA_VISIBLE_DEVICES", "").split(",") if x]
    on_gpu = inst.devices[0].kind == devmod.GPU_KIND
    return results.ResultRecord(
        name=inst.name, job_id=inst.job_id, dataroot=str(opts.dataroot),
        outdir=str(opts.outdir),
        call=results.Call(inst.job.experiment, inst.job.argv() + list(opts.user_args)),
        failure=results.Failure(kind, message), error=log_tail(inst.log_path),
        device=labels[0], devices=labels,
        gpu=results.gpu_name(system, visible) if on_gpu else None,
        device_count=sum(d.kind == devmod.GPU_KIND for d in inst.devices),
        environ=results.recorded_environ(inst.env),
        isolation={"requested": inst.placement.spec if inst.placement else None,
                   "groups": inst.placement.groups if inst.placement else None},
        returncode=code, signal=signal.Signals(-code).name if code and code < 0 else None,
        log=str(inst.log_path), written_by="harness", system=system,
        launch={**launched, "job": inst.job.definition, "suite": inst.job.suite},
    ).to_dict()


def run_jobs(jobs: list[Job], devices: list[Device], repeat: int, opts: LaunchOptions,
             on_end: Callable[[Instance], None] | None = None) -> list[Instance]:
    """All jobs once, then again ``repeat`` times; each job's instances run side by side."""
    check_jobs(jobs, devices, opts)
    supervisor = Supervisor(opts, on_end)
    done: list[Instance] = []
    for r in range(repeat):
        for job in jobs:
            prepared = _prepare(job, opts)
            rounds = (plan_progression(job, r, devices, opts, prepared)
                      if job.partition == "gpu-progression"
                      else [plan_instances(job, r, devices, opts, prepared)])
            for instances in rounds:
                try:
                    supervisor.run_group(instances)
                finally:
                    done += [i for i in instances if i.result]
    return done
