"""`milarun doctor` (coleo): the passive checks, then with ``--active`` the measured ones; and
`milarun selftest`, the harness's own overhead measured on this machine."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from coleo import Option, default

from milarun import errors
from milarun.cli.options import default_dataroot, no_test_args


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def doctor(test_args: list[str]) -> int:
    """Check this machine before a run: GPUs, drivers, cgroups, a profile's data, disk;
    with --active, measure every device (GEMM, memory, PCIe, NCCL, CPU slices)."""
    # Also check the data of this profile (quick, standard, ... or a JSON file)
    # [options: --profile]
    # [metavar: NAME]
    profile_spec: Option & str = default(None)
    # Devices, as for jobs: GPU ids (0,1,3) or cpu:N (default: every GPU, else cpu:1)
    # [options: --devices]
    # [metavar: SPEC]
    devices_spec: Option & str = default(None)
    # Data folder (default: $MILARUN_DATAROOT, then a per-user folder)
    # [alias: -d]
    dataroot: Option = default(None)
    # Measure every device too: quick (<= 60 s) or full (<= 10 min); exit 1 on a FAIL
    # [nargs: ?]
    # [metavar: quick|full]
    active: Option = default(False)
    # Write the checks (and what --active measured) to this JSON file (never over a file)
    # [options: --json]
    # [metavar: FILE]
    json_file: Option & str = default(None)

    from milarun.doctor.check import Check
    from milarun.doctor.passive.checks import (
        Machine,
        Request,
        exit_code,
        render,
        run_checks,
        summary,
    )

    no_test_args("doctor", test_args)
    level = None
    if active is not False:
        from milarun.doctor.active.run import Setup, level_of, run

        level = level_of(active)
    if json_file and Path(json_file).exists():
        raise errors.UsageError(f"--json {json_file}: file exists; choose another name")
    request = Request(
        Path(dataroot) if dataroot else default_dataroot(),
        profile=profile_spec,
        devices=devices_spec,
    )
    started, clock = time.time(), time.monotonic()
    machine = Machine.here()
    checks = []

    def show(check: Check) -> None:
        checks.append(check)
        print(render(check), flush=True)

    for check in run_checks(request, machine):
        show(check)
    if level is not None:
        from milarun.doctor.active.stopping import Stopped, stop_on_signals

        setup = Setup(backend=machine.backend)
        try:
            with stop_on_signals():
                found = run(level, devices_spec, setup, _say, show, tuple(checks))
        except Stopped as err:
            _say(err.line("doctor --active"))
            return err.exit_code
    if json_file:  # the numbers' modules (numpy, scipy) only for a record
        from milarun.doctor.active import record

        if level is None:
            seconds = time.monotonic() - clock
            found = record.build("passive", devices_spec or "", checks, [], started, seconds)
        print(f"record: {record.write(Path(json_file), found)}", file=sys.stderr)
    print(summary(checks))
    return exit_code(checks)


def before_jobs(
    profile_spec: str, level: str, devices_spec: str | None, out: Path, force: bool
) -> None:
    """`jobs --doctor LEVEL`: the active checks, printed; DoctorFailed on a FAIL. A bad
    profile is said first, not after a minute of measuring."""
    from milarun.doctor.active import before_jobs
    from milarun.doctor.active.stopping import Stopped, stop_on_signals
    from milarun.doctor.passive.checks import render
    from milarun.run import profile

    profile.load_profile(profile_spec)
    try:
        with stop_on_signals():
            before_jobs.check(
                level, devices_spec, out, force, _say, lambda c: print(render(c), flush=True)
            )
    except Stopped as err:  # no job was started
        _say(err.line(f"jobs --doctor {level}") + " and no job run")
        raise SystemExit(err.exit_code) from None


def selftest(test_args: list[str]) -> int:
    """Measure the harness's own overhead and rate error on spin steps of known time."""
    # Seconds per step time and way (bare, instrumented); 3 step times
    seconds: Option & float = default(4.0)
    # Output format: text or json
    format: Option = default("text")

    from milarun.measure import selftest  # the monitors and psutil: only when measuring

    no_test_args("selftest", test_args)
    if format not in ("text", "json"):
        raise errors.UsageError(f"--format {format}: use text or json")
    if not 0 < seconds < float("inf"):
        raise errors.UsageError(f"--seconds {seconds}: must be a positive number")
    measurements = selftest.run_selftest(seconds)
    if format == "json":
        print(selftest.render_json(measurements, seconds), end="")
        for reason in selftest.failures(measurements):
            print(f"milarun: selftest FAIL: {reason}", file=sys.stderr)
        for note in selftest.notes(measurements):
            print(f"milarun: selftest: {note}", file=sys.stderr)
    else:
        print(selftest.render_text(measurements), end="")
    return selftest.exit_code(measurements)
