"""Run one test in this process and write its result (``milarun run`` / ``rerun``)."""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from milarun import devices, diagnostics, isolation, results, sysinfo
from milarun.progress import PROGRESS_TAG
from milarun.experiment import Experiment, BadTestArguments

# Environment variables worth recording (and restoring on rerun); never the whole
# environment, which may hold secrets.
ENV_PREFIXES = (
    "CUDA_", "HIP_", "ROCR_", "ROCM_", "NVIDIA_", "NCCL_", "OMP_", "MKL_", "KMP_",
    "ONEDNN_", "DNNL_", "PYTORCH_", "TORCH_", "MILARUN_", "SLURM_JOB_ID", "SLURM_CPUS",
)


# Result fields the harness owns; --extra may add others, and fill "job".
HARNESS_KEYS = (set(results.RESULT_KEYS) | {"finished_at"}) - {"job"}


class UsageError(RuntimeError):
    """The call itself is wrong (nothing is run, nothing is written)."""


class Interrupted(BaseException):
    """SIGTERM/SIGINT reached the test."""


class TimedOut(BaseException):
    """The supervisor's SIGALRM: the job ran past its max_duration."""


def resolve_function(spec: str) -> Callable[..., Any]:
    """Import ``module:function``; a UsageError says what is wrong with it."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"'{spec}' is not MODULE:FUNCTION (e.g. milabench.models.polynome:main)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UsageError(f"cannot import module '{module_name}' of '{spec}': {err}")
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"module '{module_name}' has no function '{attr}' (from '{spec}')")
    return fn


def recorded_environ() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}


def _raise_on(exc: type[BaseException]) -> Callable[[int, Any], None]:
    def handler(signum: int, frame: Any) -> None:
        raise exc(f"received {signal.Signals(signum).name}")

    return handler


def _failure(kind: str, message: str) -> dict[str, str]:
    return {"kind": kind, "message": message}


def _check_rates(exp: Experiment) -> dict[str, str] | None:
    for log in exp.rate_logs():
        usable = len(results.steady_window(log.rates, log.slice_duration))
        if usable < results.MIN_STEADY_SLICES:
            return _failure(
                "too-short",
                f"rate log '{log.name}' has {usable} usable slices in its steady window "
                f"({len(log.rates)} in all); raise --min-slices (at least "
                f"{results.MIN_STEADY_SLICES + 2}) so the test runs longer",
            )
    if not exp.rate_logs():
        return _failure("too-short", "the test logged no rates (no experiment.rate_log())")
    return None


def progress_printer(min_interval: float = 1.0) -> Callable[[Any], None]:
    """Print a rate log's progress as one tagged JSON line, at most once per interval."""
    last = [0.0]

    def report(log: Any) -> None:
        now = time.monotonic()
        if now - last[0] < min_interval:
            return
        last[0] = now
        rule = log.length_rule
        info = {"timer": log.name, "count": log.count, "max_count": log.max_count,
                "slices": len(log.rates), "min_slices": rule.min_slices if rule else None,
                "rate": log.rates[-1] if log.rates else None, "in_block": log.in_block}
        print(f"{PROGRESS_TAG} {json.dumps(info)}", flush=True)

    return report


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
    supervisor's timeout signal all give a FAIL result.
    """
    outdir = Path(outdir)
    # Checked before the test runs, so a bad call never costs a finished run.
    clashing = sorted(set(extra or {}) & HARNESS_KEYS)
    if clashing:
        raise UsageError(f"--extra key '{clashing[0]}' would overwrite the harness's own field")
    fn = resolve_function(function)
    imported_at = time.time()  # the test module (and torch) are imported by now
    stamp = results.utc_stamp()
    exp = Experiment(name, job_id=job_id, outdir=outdir, dataroot=dataroot, stamp=stamp)
    exp.on_progress = progress_printer()
    gpu_mon = devices.gpu_monitor(interval=monitor_interval).start()
    cpu_mon = devices.cpu_monitor(interval=monitor_interval).start()
    failure = error = None
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGALRM)}
    signal.signal(signal.SIGTERM, _raise_on(Interrupted))
    signal.signal(signal.SIGALRM, _raise_on(TimedOut))
    called_at = time.time()
    try:
        fn(exp, list(argv))
    except BadTestArguments as err:
        failure, error = _failure("exception", str(err)), str(err)
    except (KeyboardInterrupt, Interrupted) as err:
        failure = _failure("interrupted", f"interrupted ({err or 'SIGINT'})")
        error = traceback.format_exc()
    except TimedOut:
        failure = _failure("timeout", "killed by the harness after the job's max_duration")
        error = traceback.format_exc()
    except BaseException as err:  # the test's own failure, SystemExit included
        failure = _failure("exception", f"{type(err).__name__}: {err}")
        error = traceback.format_exc()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        timings = exp.finish()
        gpu_record, cpu_record = gpu_mon.stop(), cpu_mon.stop()
    timings.update(exp.extra_timings)  # e.g. the other DDP ranks
    if failure is None and exp.nan_metrics():
        failure = _failure("nan", f"NaN in metrics: {', '.join(exp.nan_metrics())}")
    if failure is None:
        failure = _check_rates(exp)
    success = failure is None
    system = sysinfo.system_record()
    visible = [x for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x]
    device = devices.instance_device_label()
    gpus = system.get("gpus") or []
    result: dict[str, Any] = {
        "name": name,
        "job_id": job_id,
        "dataroot": str(dataroot),
        "outdir": str(outdir),
        "job": None,
        "device": device,
        "devices": visible if device.startswith("cuda") else [device],
        "call": {"function": function, "argv": list(argv), "arguments": exp.arguments},
        "success": success,
        "error": error if error is not None else (failure["message"] if failure else None),
        "hostname": socket.gethostname(),
        "gpu": _gpu_name(gpus, visible) if device.startswith("cuda") else None,
        "device_count": len(visible) if device.startswith("cuda") else 0,
        "environ": recorded_environ(),
        "metrics": exp.metrics,
        "timings": timings,
        "gpu_monitor": gpu_record,
        "cpu_monitor": cpu_record,
        "milarun_version": sysinfo.milarun_version(),
        "system": system,
        "isolation": isolation.isolation_record(),
        "failure": failure,
        "returncode": 0 if success else 1,
        "synthetic_data": exp.synthetic_data,
        "rerun_of": rerun_of,
        "startup": diagnostics.startup(imported_at, called_at, exp.rate_logs()),
        "diagnostics": {log.name: diagnostics.log_record(log) for log in exp.rate_logs()},
        "efficiency": exp.efficiency,
        "finished_at": time.time(),
    }
    result.update(extra or {})
    if not exp.write_result:
        # A non-zero DDP rank: rank 0 writes the result for all. When this rank is the one
        # that failed, its log is the only place that says why.
        if not success:
            print(f"rank {os.environ.get('RANK')}: {failure['kind']}: {result['error']}",
                  file=sys.stderr)
        return result, None
    try:
        path = results.write_result(outdir, result, stamp, outfile)
    except FileExistsError:  # never overwrite, never lose the run: use the DESIGN name
        path = results.write_result(outdir, result, stamp)
    return result, path


def _gpu_name(gpus: list[dict[str, Any]], visible: list[str]) -> str | None:
    for gpu in gpus:
        if visible and str(gpu.get("index")) == visible[0]:
            return gpu.get("name")
    return gpus[0].get("name") if gpus else None


def check_outdir(outdir: Path) -> None:
    """Fail early, before running anything, when results could not be written."""
    try:
        Path(outdir).mkdir(parents=True, exist_ok=True)
        probe = Path(outdir) / f".milarun-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UsageError(
            f"output folder '{outdir}' is not writable ({err.strerror}); pass -o with a "
            "folder you can write"
        )


def exit_code(result: dict[str, Any]) -> int:
    kind = (result.get("failure") or {}).get("kind")
    if kind == "interrupted":
        return 130
    return 0 if result["success"] else 1


