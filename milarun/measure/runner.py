"""Run one test in this process and write its result (``milarun run`` / ``rerun``)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milarun import errors, results
from milarun.machine import bmc, devices, monitors, sysinfo, watchdog
from milarun.machine.gpu import power
from milarun.machine.gpuids import instance_gpus
from milarun.measure import confinement, contention, diagnostics, energy, nodepower, startup
from milarun.measure.call import check_extra, resolve_function
from milarun.measure.experiment import BadTestArguments, DoesNotFit, Experiment, RateLog
from milarun.results import channel, read, records, steady
from milarun.results.records import Failure, RateRecord, TimerRecord

# The prefix of the progress lines an instance prints on stdout (the supervisor's board
# reads them from the instance's log).
PROGRESS_TAG = "MILARUN_PROGRESS"
UNWRITTEN_TAG = channel.UNWRITTEN_TAG


class Interrupted(BaseException):
    """SIGTERM/SIGINT reached the test."""


class TimedOut(BaseException):
    """The supervisor's SIGALRM: the job ran past its max_duration."""


def _raise_on(exc: type[BaseException]) -> Callable[[int, Any], None]:
    def handler(signum: int, frame: Any) -> None:
        raise exc(f"received {signal.Signals(signum).name}")

    return handler


def _check_measurement(exp: Experiment) -> Failure | None:
    """A run whose metrics hold a NaN or an infinity (a diverged loss is no success), whose
    rates are too few to measure, or whose steady rate is 0 (or absurd), failed."""
    bad = [k for k, v in exp.metrics.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        return Failure(
            "nan", "non-finite metrics: " + ", ".join(f"{k}={exp.metrics[k]}" for k in bad)
        )
    logs = exp.rate_logs()
    for log in logs:
        usable = len(steady.window(log.rates, log.slice_duration))
        if usable < steady.MIN_SLICES:
            return Failure(
                "too-short",
                f"rate log '{log.name}' has {usable} usable slices in its steady window "
                f"({len(log.rates)} in all); raise --min-slices (at least "
                f"{steady.MIN_SLICES + 2}) so the test runs longer",
            )
    if not logs:
        return Failure("too-short", "the test logged no rates (no experiment.rate_log())")
    for log in logs:
        # The rule the reports read a rate by (results.series.RateSeries.steady_rate): a run
        # that counted no example measured nothing, and must not be saved a success.
        rate = steady.rate(log.rates, log.slice_duration)
        if rate is None or not 0 < rate <= results.MAX_RATE:
            shown = "no" if rate is None else f"{rate:g}"
            return Failure(
                "no-rate",
                f"rate log '{log.name}' has a steady rate of {shown} examples/s, not a "
                "measurement: each `with log.block(n)` must count the n examples it "
                f"processed (more than 0, at most {results.MAX_RATE:g}/s)",
            )
    return None


def progress_printer(
    min_interval: float = 1.0, supervised: bool | None = None
) -> Callable[[Any], None]:
    """Show a rate log's progress at most once per interval: under `milarun jobs` (its
    SUPERVISOR_ENV in the environment, or ``supervised``) one tagged JSON line on stdout for
    the supervisor's board; run by hand, one plain line on stderr for the person watching."""
    if supervised is None:
        supervised = watchdog.SUPERVISOR_ENV in os.environ
    # -inf, not 0: time.monotonic() counts from boot, so on a machine up for less than
    # min_interval a 0 would hold back the first line
    last = [-math.inf]

    def report(log: Any) -> None:
        now = time.monotonic()
        finished = getattr(log, "finished", False)
        if now - last[0] < min_interval and not finished:
            return
        last[0] = now
        rule = log.length_rule
        info = {
            "timer": log.name,
            "count": log.count,
            "max_count": log.max_count,
            "slices": len(log.rates),
            "min_slices": rule.min_slices if rule else None,
            "rate": log.rates[-1] if log.rates else None,
            "in_block": log.in_block,
            "finished": finished,  # its window is measured; the test may go on after it
        }
        if supervised:
            print(f"{PROGRESS_TAG} {json.dumps(info)}", flush=True)
            return
        if finished:
            print(f"  {log.name}: measured, {len(log.rates)} slices", file=sys.stderr, flush=True)
            return
        rate = f"{info['rate']:,.2f} examples/s" if info["rate"] is not None else "starting"
        slices = f"{info['slices']}/{info['min_slices']}" if rule else str(info["slices"])
        print(
            f"  {log.name}: {rate}, {slices} slices, {log.count:,.0f} examples",
            file=sys.stderr,
            flush=True,
        )

    return report


@dataclass(frozen=True)
class _Ended:
    """How the test function ended, and what the process measured meanwhile."""

    called_at: float
    failure: Failure | None
    error: str | None
    timings: dict[str, RateRecord | TimerRecord]
    gpu_monitor: dict[str, Any] | None
    cpu_monitor: dict[str, Any] | None
    node_monitor: dict[str, Any] | None


def _call(
    fn: Callable[..., Any], exp: Experiment, argv: list[str], monitor_interval: float
) -> _Ended:
    """``fn(exp, argv)`` under the monitors; SIGTERM and SIGALRM become its failures."""
    gpu_mon = monitors.gpu_monitor(interval=monitor_interval).start()
    cpu_mon = monitors.cpu_monitor(interval=monitor_interval).start()
    node_mon = bmc.node_monitor().start()  # the BMC's own interval: it answers slowly
    failure = error = None
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGALRM)}
    signal.signal(signal.SIGTERM, _raise_on(Interrupted))
    signal.signal(signal.SIGALRM, _raise_on(TimedOut))
    called_at = time.time()
    try:
        fn(exp, list(argv))
    except BadTestArguments as err:
        failure, error = Failure("exception", str(err)), str(err)
    except (KeyboardInterrupt, Interrupted) as err:
        failure = Failure("interrupted", f"interrupted ({err or 'SIGINT'})")
        error = traceback.format_exc()
    except TimedOut:
        failure = Failure("timeout", "killed by the harness after the job's max_duration")
        error = traceback.format_exc()
    except DoesNotFit as err:
        failure, error = Failure("oom", str(err)), traceback.format_exc()
    except BaseException as err:  # the test's own failure, SystemExit included
        # torch.OutOfMemoryError (CUDA, HIP) by name: the harness imports no torch here
        kind = "oom" if type(err).__name__ == "OutOfMemoryError" else "exception"
        own = getattr(err, "failure_kind", None)  # ServerFailed, EngineMissing: their kind
        failure = Failure(own or kind, str(err) if own else f"{type(err).__name__}: {err}")
        error = traceback.format_exc()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        timings = exp.finish()
        for mon in (gpu_mon, cpu_mon):
            if mon.unavailable is None:
                mon.sample()  # a reading after the run, so the samples bracket its window
        bmc.last_sample(node_mon)  # the same, bounded in time
        gpu_record, cpu_record, node_record = gpu_mon.stop(), cpu_mon.stop(), node_mon.stop()
    return _Ended(called_at, failure, error, timings, gpu_record, cpu_record, node_record)


def _test_record(
    function: str,
    argv: list[str],
    exp: Experiment,
    ended: _Ended,
    imported_at: float,
    extra: dict[str, Any] | None,
    rerun_of: str | None,
) -> records.ResultRecord:
    """The record of a test that ran in this process."""
    failure = ended.failure or _check_measurement(exp)
    error = ended.error if ended.error is not None else (failure.message if failure else None)
    gpus = instance_gpus()
    ids = [g.id for g in gpus]  # as the operator named them (CUDA got their UUIDs)
    device = devices.instance_device_label()
    on_gpu = device.startswith("cuda")
    system = sysinfo.system_record()
    logs: list[RateLog] = exp.rate_logs()
    # The monitor keys each GPU by its CUDA_VISIBLE_DEVICES entry (a UUID under `jobs`):
    # energy and throttle records name it as the operator did.
    labels = {g.uuid or g.id: f"cuda:{g.id}" for g in gpus}
    gpu_energy = energy.energy_record(device, ended.timings, ended.gpu_monitor, labels)
    if on_gpu and gpu_energy.joules is not None:
        found = power.board_power([g.uuid or g.id for g in gpus])
        gpu_energy = energy.with_board_power(
            gpu_energy, [(p.board_power_w, p.power_limit_w) for p in found]
        )
    node_energy = nodepower.node_energy_record(
        ended.timings, ended.node_monitor, gpu_energy if on_gpu else None
    )
    return records.ResultRecord(
        name=exp.name,
        job_id=exp.job_id,
        dataroot=str(exp.dataroot),
        outdir=str(exp.outdir),
        call=records.Call(function, tuple(argv), exp.arguments),
        failure=failure,
        error=error,
        device=device,
        devices=ids if on_gpu else [device],
        gpu=records.gpu_name(system, ids) if on_gpu else None,
        device_count=len(ids) if on_gpu else 0,
        gpu_identity=gpus,
        environ=records.recorded_environ(os.environ),
        isolation=confinement.isolation_record(),
        returncode=0 if failure is None else 1,
        metrics=exp.metrics,
        timings=ended.timings,
        gpu_monitor=ended.gpu_monitor,
        cpu_monitor=ended.cpu_monitor,
        synthetic_data=exp.synthetic_data,
        dataset=exp.dataset,
        rerun_of=rerun_of,
        startup=startup.startup(imported_at, ended.called_at, logs),
        diagnostics={
            log.name: contention.with_contention(
                energy.with_throttle(
                    diagnostics.log_record(log),
                    ended.timings.get(log.name),
                    ended.gpu_monitor,
                    labels,
                ),
                ended.timings.get(log.name),
                ended.cpu_monitor,
            )
            for log in logs
        },
        efficiency=exp.efficiency,
        launch=extra or {},
        system=system,
        ranks=tuple(exp.ranks),
        energy=gpu_energy,
        node_monitor=ended.node_monitor if node_energy is not None else None,
        node_energy=node_energy,
    )


def run_test(
    function: str,
    argv: list[str],
    name: str,
    job_id: str,
    outdir: Path,
    dataroot: Path,
    extra: dict[str, Any] | None = None,
    rerun_of: str | None = None,
    monitor_interval: float = 1.0,
    outfile: Path | None = None,
) -> tuple[dict[str, Any], Path | None]:
    """Run ``function(experiment, argv)`` and write its result; returns (result, path).

    Every outcome is written: exceptions, NaN metrics, too-short runs, SIGTERM and the
    supervisor's timeout signal all give a FAIL result. ``extra``: the launch's fields
    (job, suite, repeat, ...; see records.ResultRecord.launch).
    """
    outdir = Path(outdir)
    check_extra(extra)
    watchdog.watch_parent()  # under `jobs`: never outlive the supervisor
    fn = resolve_function(function)
    imported_at = time.time()  # the test module (and torch) are imported by now
    # Under `jobs` the supervisor chose the stamp, so it reads exactly this run's file and
    # never another run's of the same name and job id.
    stamp = os.environ.get(watchdog.RESULT_STAMP_ENV) or results.utc_stamp()
    exp = Experiment(
        name,
        job_id=job_id,
        outdir=outdir,
        dataroot=dataroot,
        stamp=stamp,
        on_progress=progress_printer(),
    )
    ended = _call(fn, exp, argv, monitor_interval)
    record = _test_record(function, argv, exp, ended, imported_at, extra, rerun_of)
    result = record.to_dict()
    if not exp.write_result:
        # A non-zero DDP rank: rank 0 writes the result for all. When this rank is the one
        # that failed, its log is the only place that says why.
        if record.failure is not None:
            print(
                f"rank {os.environ.get('RANK')}: {record.failure.kind}: {record.error}",
                file=sys.stderr,
            )
        return result, None
    try:
        try:
            path = results.write_result(outdir, result, stamp, outfile)
        except FileExistsError:  # never overwrite, never lose the run: use the DESIGN name
            path = results.write_result(outdir, result, stamp)
    except errors.WriteError as err:
        # The measurement must survive the disk. Under `milarun jobs`: the supervisor takes
        # it through its channel (no disk needed) and writes it when it can.
        unsent = channel.send(result)
        if unsent is None:
            with contextlib.suppress(OSError):  # its log may be on the full disk too
                print(
                    f"milarun: {err}; the result went to milarun jobs (pid "
                    f"{os.environ.get(watchdog.SUPERVISOR_ENV)}), which writes it when it can",
                    file=sys.stderr,
                    flush=True,
                )
            return result, None
        # Else the whole record goes to this process's output, then the one-line error.
        print(f"{UNWRITTEN_TAG} {json.dumps(result, default=str)}", flush=True)
        raise errors.WriteError(
            f"{err}; the result is printed in full on the line "
            f"starting with {UNWRITTEN_TAG} above (or in the "
            "instance's log)"
        ) from None
    return result, path


def exit_code(result: dict[str, Any]) -> int:
    view = read.ResultView.from_dict(result)
    if view.failure is not None and view.failure.kind == "interrupted":
        return 130
    return 0 if view.success else 1
