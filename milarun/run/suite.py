"""A suite run (`milarun jobs`): a profile's jobs on this machine's devices, then the report
of what just ran, as text and as an HTML page next to the results."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from milarun import errors, results
from milarun.machine import devices, isolation, slurmenv, watchdog
from milarun.machine.gpuids import resolve_gpus
from milarun.report import summary
from milarun.results import bulk, manifest, read
from milarun.results.folder import Loaded, check_dataroot, check_outdir
from milarun.run import arguments, held, launch, plan, profile

log = logging.getLogger("milarun")


@dataclass(frozen=True)
class SuiteRequest:
    """What the operator asked for; paths are already resolved (the CLI's defaults)."""

    profile: str
    outdir: Path
    dataroot: Path
    names: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    repeat: int = 1
    devices: str | None = None  # "0,1,3" or "cpu:N"; None: every GPU, else one CPU slice
    use_cgexec: bool = True
    verbose: bool = False
    warm_start: bool = True  # fork instances from a warm process (run/warm.py)
    progress_interval: float = 10.0
    user_args: list[str] = field(default_factory=list)
    rendezvous: plan.Rendezvous | None = None  # this node's part of a multi-node run
    user_args_by_job: dict[str, list[str]] = field(default_factory=dict)  # run.arguments
    oversubscribe: bool = False  # run CPU slices beyond this machine's CPUs or memory
    spare_out: Path | None = None  # where results go that the full results disk cannot take
    wait_for_space: float = held.DEFAULT_WAIT  # seconds, when a held result is a measurement
    challenge: str | None = None  # the tender's random value, kept in the run manifest


@dataclass(frozen=True)
class SuiteOutcome:
    """The end of a suite run: its report, where it lies, and the exit code."""

    outdir: Path
    report_text: str = ""
    page: Path | None = None
    exit_code: int = 0
    interrupted_by: str | None = None


def run_suite(
    request: SuiteRequest,
    say: Callable[[str], None],
    on_end: Callable[[plan.Instance], None] | None = None,
) -> SuiteOutcome:
    """Check the request, run every selected job, and build the report of the results.

    ``say`` gets the header line before anything runs; ``on_end`` each finished instance.
    """
    if request.repeat < 1:
        raise errors.UsageError(f"--repeat {request.repeat}: must be at least 1")
    if not 0 <= request.wait_for_space <= 7 * 86400:
        raise errors.UsageError(
            f"--wait-for-space {request.wait_for_space}: give seconds, from 0 to a week"
        )
    if request.spare_out is not None:
        try:
            check_outdir(request.spare_out)
        except errors.UsageError as err:
            why = getattr(err.__cause__, "strerror", None) or err
            raise errors.UsageError(
                f"--spare-out {request.spare_out}: cannot be written ({why}); name a folder "
                "you can write, on another disk than the results"
            ) from None
    watchdog.log_limit()  # a bad MILARUN_LOG_LIMIT_MB is one line, before anything runs
    extra_task = slurmenv.extra_task_on_node()
    if extra_task:
        raise errors.UsageError(extra_task)
    # A Slurm task writes <out>/nodes/<node>: one folder serves the whole allocation.
    request = dataclasses.replace(request, outdir=slurmenv.node_outdir(request.outdir))
    prof = profile.load_profile(request.profile)
    selected = prof.select(request.names, request.tags)
    devs = resolve_gpus(
        devices.parse_device_spec(request.devices)
        if request.devices is not None
        else devices.discover_devices()
    )
    check_cpu_slices(devs, request.oversubscribe)
    # Every job's arguments parse, before anything is written or run.
    args_by_job = arguments.check_arguments(selected, request.user_args, shipped=prof.shipped)
    request = dataclasses.replace(request, user_args_by_job=args_by_job)
    check_outdir(request.outdir)
    check_dataroot(request.dataroot)
    # One live `jobs` per folder: two would write the same names side by side.
    try:
        with watchdog.hold_outdir(request.outdir):
            return _run_held(request, prof, selected, devs, say, on_end)
    except watchdog.OutdirBusy as err:
        raise errors.UsageError(str(err)) from None


# What one CPU slice's instance needs at least: torch and a small model's training.
SLICE_MEMORY = 2**30


def check_cpu_slices(devs: list[devices.Device], oversubscribe: bool) -> None:
    """Refuse more CPU slices than the CPUs this process may use, or than its memory holds
    at SLICE_MEMORY each: they would share CPUs (every rate lower, not the machine's) or
    meet the OOM killer. ``oversubscribe``: warn, and run them."""
    slices = len(devs) if devs and devs[0].kind == devices.CPU_KIND else 0
    if not slices:
        return
    cpus = len(os.sched_getaffinity(0))
    memory = psutil.virtual_memory().total
    problems = []
    if slices > cpus:
        problems.append(f"more slices than the {cpus} CPU(s) this process may use")
    if slices * SLICE_MEMORY > memory:
        problems.append(
            f"{slices} GiB of memory at least, and this machine has {memory / 2**30:.1f} GiB"
        )
    if not problems:
        return
    text = f"--devices cpu:{slices} asks for {' and '.join(problems)}"
    if not oversubscribe:
        raise errors.UsageError(
            f"{text}: use at most cpu:{min(cpus, memory // SLICE_MEMORY) or 1}, or pass "
            "--oversubscribe to run them anyway"
        )
    log.warning(
        "%s: the slices will share them and each rate will be lower (--oversubscribe)", text
    )


def _run_held(
    request: SuiteRequest,
    prof: profile.Profile,
    selected: list[profile.Job],
    devs: list[devices.Device],
    say: Callable[[str], None],
    on_end: Callable[[plan.Instance], None] | None,
) -> SuiteOutcome:
    """run_suite's work once the output folder is this process's."""
    opts = plan.LaunchOptions(
        outdir=request.outdir,
        dataroot=request.dataroot,
        user_args=request.user_args,
        use_cgexec=request.use_cgexec,
        hierarchies=isolation.find_hierarchies() if request.use_cgexec else {},
        verbose=request.verbose,
        warm_start=request.warm_start,
        progress_interval=request.progress_interval,
        rendezvous=request.rendezvous,
        user_args_by_job=request.user_args_by_job,
    )
    expected = expected_tests(selected, devs, request.rendezvous)
    record = manifest.ManifestWriter.start(
        request.outdir,
        prof.name,
        sorted(expected),
        request.repeat,
        [d.label for d in devs],
        plan.planned_instances(selected, devs, request.repeat, request.rendezvous),
        challenge=request.challenge,
    )
    record.keep_machine()  # what `milarun package` packs of the run (the tender workflow)
    with open(prof.path, encoding="utf-8", newline="") as f:  # its bytes, for their hash
        record.keep("profile", f.read())
    say(
        f"{prof.name}: {len(selected)} job(s) x {request.repeat} on "
        f"{', '.join(d.label for d in devs)} -> {request.outdir}"
    )

    unwritten: list[plan.Instance] = []

    def recorded(instance: plan.Instance) -> None:
        if instance.unwritten:  # held in memory: written once there is room (settle)
            unwritten.append(instance)
        record.instance_ended(
            instance.name,
            instance.job_id,
            instance.result_path,
            read.ResultView.from_dict(instance.result).success,
            instance.unwritten,
        )
        # space may have come back since an earlier one was held
        for inst in held.write_held(unwritten, request.outdir, say):
            if inst.result_path is not None:
                record.instance_written(inst.name, inst.job_id, inst.result_path)

    def settle(wait: float) -> None:
        where = request.spare_out
        for inst in held.settle(unwritten, request.outdir, where, wait, say):
            if inst.result_path is not None:
                record.instance_written(inst.name, inst.job_id, inst.result_path)

    try:
        done = run_jobs(selected, devs, request.repeat, opts, on_end=on_end, on_recorded=recorded)
    except launch.JobsInterrupted as err:
        settle(0.0)  # stopped: no wait for space
        record.finish("interrupted", str(err))
        return SuiteOutcome(request.outdir, exit_code=err.exit_code, interrupted_by=str(err))
    except BrokenPipeError:
        record.finish("failed", "its output was closed (SIGPIPE: a `| head`?)")
        raise
    except BaseException as err:
        record.finish("failed", f"{type(err).__name__}: {err}")
        raise
    settle(request.wait_for_space)
    record.finish("complete")
    parts = [i for i in done if i.result.get("recorded_on_head")]
    done = [i for i in done if not i.result.get("recorded_on_head")]
    rdzv = request.rendezvous
    if rdzv is not None and parts and not done:  # a node other than the head's: no results
        failed = sum(not read.ResultView.from_dict(i.result).success for i in parts)
        return SuiteOutcome(
            request.outdir,
            report_text=(
                f"node rank {rdzv.node_rank} of {rdzv.nnodes}: {len(parts) - failed} run(s) of "
                f"its ranks ended well, {failed} failed; rank 0 on the head node "
                f"({rdzv.master_addr}) records them\n"
            ),
            exit_code=1 if failed else 0,
        )
    if slurmenv.on_node():  # a node's folder of a fleet run: its digest, for the report
        bulk.write_digest(request.outdir)
    return _report(prof.name, expected, done, request.outdir)


def expected_tests(
    selected: list[profile.Job],
    devs: list[devices.Device],
    rendezvous: plan.Rendezvous | None = None,
) -> set[str]:
    """The result names the selection can produce on these devices: a gpu-progression job
    makes ``<test>.1`` .. ``<test>.N`` for N devices, so scaling.2 is not missing on one;
    on K nodes (a rendezvous), the one ``<test>.<K x N>``."""
    sizes = [rendezvous.nnodes * len(devs)] if rendezvous else range(1, len(devs) + 1)
    expected = {
        f"{j.fullname}.{k}" for j in selected if j.partition == "gpu-progression" for k in sizes
    }
    return expected | {j.fullname for j in selected if j.partition != "gpu-progression"}


def _report(
    title: str, expected: set[str], done: list[plan.Instance], outdir: Path
) -> SuiteOutcome:
    from milarun.report.build import build_report  # pandas/matplotlib: only once jobs are done
    from milarun.report.render import html
    from milarun.report.render.text import to_text
    from milarun.report.weights import default_weights

    loaded = Loaded(
        root=outdir,
        results=read.views(i.result for i in done if i.result),
        paths=[i.result_path or outdir / "?" for i in done if i.result],
    )
    summ = summary.summarize(loaded.results)
    weights: Any = default_weights(list(summ))
    if weights:  # score what was selected and could run: the rest is not "missing"
        weights = (weights[0], {t: w for t, w in weights[1].items() if t in expected})
    rep = build_report(summ, title=f"milarun {title}", weights=weights, loaded=loaded)
    path = outdir / f"report.{results.utc_stamp()}.html"
    page: Path | None = path
    try:
        html.write_html(path, html.to_html(rep))
    except errors.WriteError as err:  # the results are written: the text report still shows
        log.warning("%s; `milarun report %s --html FILE` writes it elsewhere", err, outdir)
        page = None
    return SuiteOutcome(outdir, to_text(rep), page, 1 if rep.failures else 0)


def run_jobs(
    jobs: list[profile.Job],
    devs: list[devices.Device],
    repeat: int,
    opts: plan.LaunchOptions,
    on_end: Callable[[plan.Instance], None] | None = None,
    on_recorded: Callable[[plan.Instance], None] | None = None,
) -> list[plan.Instance]:
    """All jobs once, then again ``repeat`` times; each job's instances run side by side.
    Returns every ended instance (a multi-node run's part on another node than the head
    has ``recorded_on_head`` in its result, which is not written)."""
    plan.check_jobs(jobs, devs, opts)
    supervisor = launch.Supervisor(opts, on_end, on_recorded)
    done: list[plan.Instance] = []
    # between prepares and groups too: a stop signal is never the default action
    previous = {s: signal.signal(s, supervisor.request_stop) for s in launch.STOP_SIGNALS}
    try:
        for r in range(repeat):
            for job in jobs:
                prepared = supervisor.prepare(job)
                rounds = (
                    plan.plan_progression(job, r, devs, opts, prepared)
                    if job.partition == "gpu-progression"
                    else [plan.plan_instances(job, r, devs, opts, prepared)]
                )
                for instances in rounds:
                    try:
                        supervisor.run_group(instances)
                    finally:
                        done += [i for i in instances if i.result]
    finally:
        supervisor.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return done
