"""The call of one test: what `milarun run` and `rerun` are asked to do, checked before
anything runs (names, folders, --extra, the original result of a rerun and its saved
environment)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from milarun import results
from milarun.errors import UsageError
from milarun.machine import watchdog
from milarun.measure import diagnostics, startup
from milarun.results import read
from milarun.results.folder import check_outdir
from milarun.results.schema import HARNESS_WRITER


def resolve_function(spec: str) -> Callable[..., Any]:
    """Import ``module:function``; a UsageError says what is wrong with it."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"'{spec}' is not MODULE:FUNCTION (e.g. milabench.models.polynome:main)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UsageError(f"cannot import module '{module_name}' of '{spec}': {err}") from err
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"module '{module_name}' has no function '{attr}' (from '{spec}')")
    return fn


def check_extra(extra: dict[str, Any] | None) -> None:
    """Checked before the test runs, so a bad call never costs a finished run."""
    clashing = sorted(set(extra or {}) & results.OWN_KEYS)
    if clashing:
        raise UsageError(f"--extra key '{clashing[0]}' would overwrite the harness's own field")


# -- the policy of `milarun run` and `milarun rerun` --------------------------------------
@dataclass(frozen=True)
class RunCall:
    """One test to run in this process, every path and name decided: run_test's arguments."""

    function: str
    argv: list[str]
    name: str
    job_id: str
    outdir: Path
    dataroot: Path
    extra: dict[str, Any] = field(default_factory=dict)
    rerun_of: str | None = None
    outfile: Path | None = None

    def options(self) -> dict[str, Any]:
        """run_test's keyword arguments (all but function and argv)."""
        return {k: v for k, v in asdict(self).items() if k not in ("function", "argv")}


def plan_run(
    function: str,
    test_args: list[str],
    out: str | Path,
    dataroot: Path,
    experiment_name: str | None = None,
    job_id: str = "0",
    extra: dict[str, Any] | None = None,
) -> RunCall:
    """``milarun run``: ``out`` is a folder, or a .json file name for the result (never
    overwritten); the name defaults to the test module's. Bad input fails here, before
    anything runs or any folder is made."""
    check_extra(extra)
    outdir, outfile = Path(out), None
    if str(out).endswith(".json"):
        outfile = Path(out)
        outdir = outfile.parent
        if outfile.exists():
            raise UsageError(f"-o {out}: file exists; results are never overwritten")
    name = (
        results.safe_name(experiment_name, "--experiment-name")
        if experiment_name
        else function.split(":")[0].rsplit(".", 1)[-1]
    )
    results.safe_name(name, "test name")
    results.safe_name(job_id, "--job-id")
    resolve_function(function)  # after the checks of text: it imports the test (torch: seconds)
    check_outdir(outdir)
    return RunCall(
        function,
        list(test_args),
        name,
        job_id,
        outdir,
        dataroot,
        dict(extra or {}),
        outfile=outfile,
    )


def plan_rerun(
    result_file: str | Path, out: str | Path | None, test_args: list[str], dataroot: Path
) -> RunCall:
    """``milarun rerun``: the original's call, name, job id, job, suite and data folder
    (``dataroot`` when it has none), the new ``test_args`` last; the result goes to a
    folder of its own beside the original's (``<folder>.rerun-<stamp>``) unless ``out``
    says otherwise, so a rerun with other arguments never joins the original's runs.

    The original's recorded environment is applied to this process here, before the test
    is imported: CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS and the like are only read when
    torch loads. Not the supervisor's own variables of that job (RERUN_DROPPED_ENV): its
    MILARUN_DEADLINE, long past by now, would stop the rerun at its first slice; its pid
    (long dead: the watchdog would end the rerun at once); its result stamp (the
    original's file name); its MILARUN_CGROUP (a student group this process is not in);
    the Slurm job it ran in.
    """
    original = results.load_result(Path(result_file))
    problem = results.result_problem(original)
    if problem:
        raise UsageError(f"{result_file}: {problem}; fix the file")
    view = read.ResultView.from_dict(original)
    _check_reproducible(result_file, view)
    call = view.call
    if call is None or not call.function:
        raise UsageError(
            f"{result_file}: it holds no call to repeat (no call.function); run the test "
            "again with `milarun jobs`"
        )
    argv = call.argv or ()
    name = results.safe_name(view.name, f"{result_file}: name")
    job_id = results.safe_name(view.recorded_job_id or "0", f"{result_file}: job_id")
    dataroot_saved = view.dataroot
    extra = {k: v for k, v in (("job", view.job), ("suite", view.suite)) if v is not None}
    environ = _saved_environ(result_file, view.environ)
    folder = Path(result_file).resolve().parent
    outdir = Path(out) if out else folder.with_name(f"{folder.name}.rerun-{results.utc_stamp()}")
    check_outdir(outdir)
    os.environ.update(environ)
    return RunCall(
        call.function,
        list(argv) + list(test_args),
        name,
        job_id,
        outdir,
        Path(dataroot_saved or dataroot),
        extra,
        rerun_of=str(Path(result_file).resolve()),
    )


def _check_reproducible(result_file: str | Path, original: read.ResultView) -> None:
    """A rerun repeats one process: refuse a record it cannot reproduce."""
    # The supervisor's record of a run that wrote none (a crash, a kill) holds the call it
    # launched: that repeats. Another writer's (`slurm check`) knows the test, not its call.
    if original.written_by and original.written_by != HARNESS_WRITER:
        raise UsageError(
            f"{result_file}: written by {original.written_by} for a run that recorded "
            "nothing (it holds no call to repeat, only the test's name); run the test again "
            "with `milarun jobs`"
        )
    world, ranks = original.world_size, original.ranks
    if (world is not None and world > 1) or len(ranks) > 1:
        size = world if world is not None else len(ranks)
        parts = original.name[:200].split(".")  # <suite>.<test>.<k>
        test = parts[1] if len(parts) > 2 else "TEST"
        raise UsageError(
            f"{result_file}: a run of {size} ranks under torchrun (maybe over several nodes); "
            f"rerun repeats one process: run `milarun jobs PROFILE --name {test}` (or "
            "`milarun slurm scaling`) instead"
        )


# The supervisor's variables of one job, not restored by a rerun (see plan_rerun).
RERUN_DROPPED_ENV = (
    diagnostics.DEADLINE_ENV,
    watchdog.SUPERVISOR_ENV,
    watchdog.RESULT_STAMP_ENV,
    startup.LAUNCHED_AT_ENV,  # how that run started, not this one
    startup.START_ENV,
    "MILARUN_CGROUP",
    # the Slurm job it ran in is over: the rerun's own `slurm` record says
    # where it runs now
    "SLURM_JOB_ID",
    "SLURM_CPUS_ON_NODE",
    "SLURM_CPUS_PER_TASK",
)


def _saved_environ(result_file: str | Path, environ: Any) -> dict[str, str]:
    """A result's recorded environment as a rerun restores it; a hand-edited one that is
    not {NAME: "value"} is refused with the variable's name."""
    if environ is None:
        return {}
    if not isinstance(environ, dict):
        raise UsageError(f'{result_file}: environ is not an object of NAME -> "value"')
    for key, value in environ.items():
        if not key or "=" in key or "\0" in key:
            raise UsageError(
                f"{result_file}: environ name {key[:60]!r} is not a variable name; remove it"
            )
        if not isinstance(value, str) or "\0" in value:
            raise UsageError(
                f"{result_file}: environ {key}={str(value)[:60]!r} is not a "
                "string; quote it or remove it"
            )
    return {k: v for k, v in environ.items() if k not in RERUN_DROPPED_ENV}
