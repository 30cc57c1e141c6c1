"""`jobs --doctor quick|full`: the active checks before a run, their record in the run folder.

The record goes to ``<out>/doctor-active.json`` (``<out>/nodes/<node>/`` in a Slurm task, as the
results), or ``doctor-active.<stamp>.json`` where an earlier run left one: nothing recorded is
overwritten. A FAIL stops the run before anything is launched, unless ``force``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from milarun import errors, results
from milarun.doctor.active import record
from milarun.doctor.active.run import Setup, level_of, run
from milarun.doctor.check import FAIL, Check
from milarun.machine import devices, gpu, slurmenv


def record_path(outdir: Path) -> Path:
    folder = slurmenv.node_outdir(outdir)
    path = folder / record.FILENAME
    if path.exists():
        path = folder / f"{results.DOCTOR_RECORD}.{results.utc_stamp()}.json"
    return path


def check(
    level: str,
    devices_spec: str | None,
    outdir: Path,
    force: bool,
    say: Callable[[str], None],
    emit: Callable[[Check], None],
    setup: Setup | None = None,
) -> Path:
    """Measure the devices the run will use; write the record; DoctorFailed on a FAIL
    (unless ``force``). Returns the record's path."""
    level = level_of(level)
    if devices_spec is not None:
        devices.parse_device_spec(devices_spec)  # a bad spec: before anything is measured
    if setup is None:
        setup = Setup(backend=gpu.load())
    found = run(level, devices_spec, setup, say, emit)
    path = record_path(outdir)
    path.parent.mkdir(parents=True, exist_ok=True)
    record.write(path, found)
    failed = [c["name"] for c in found["checks"] if c["status"] == FAIL]
    if not failed:
        say(f"doctor --active {level}: {found['verdict']} (record: {path})")
        return path
    shown = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
    if force:
        say(f"doctor --active {level}: FAIL ({shown}); --force: the run starts anyway")
        return path
    raise errors.DoctorFailed(
        f"doctor --active {level} found {len(failed)} FAIL(s): {shown}; nothing was run "
        f"(record: {path}); fix them, or pass --force to run anyway"
    )
