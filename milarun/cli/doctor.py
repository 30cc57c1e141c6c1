"""`milarun doctor` (coleo): the passive checks, then with ``--active`` the measured ones."""

from __future__ import annotations

import sys
from pathlib import Path

from coleo import Option, default

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
    # Write the record of the active checks to this JSON file (never over a file)
    # [options: --json]
    # [metavar: FILE]
    json_file: Option & str = default(None)

    from milarun import errors
    from milarun.doctor import passive

    no_test_args("doctor", test_args)
    if json_file and active is False:
        raise errors.UsageError("--json records the active checks: add --active quick|full")
    level = None
    if active is not False:
        from milarun.doctor import active as measured
        from milarun.doctor import record

        level = measured.level_of(active)
        if json_file and Path(json_file).exists():
            raise errors.UsageError(f"--json {json_file}: file exists; choose another name")
    request = passive.Request(
        Path(dataroot) if dataroot else default_dataroot(),
        profile=profile_spec,
        devices=devices_spec,
    )
    machine = passive.Machine.here()
    checks = []

    def show(check: passive.Check) -> None:
        checks.append(check)
        print(passive.render(check), flush=True)

    for check in passive.run_checks(request, machine):
        show(check)
    if level is not None:
        setup = measured.Setup(nvml=machine.nvml)
        found = measured.run(level, devices_spec, setup, _say, show)
        if json_file:
            print(f"record: {record.write(Path(json_file), found)}", file=sys.stderr)
    print(passive.summary(checks))
    return passive.exit_code(checks)


def before_jobs(level: str, devices_spec: str | None, out: Path, force: bool) -> None:
    """`jobs --doctor LEVEL`: the active checks, printed; DoctorFailed on a FAIL."""
    from milarun.doctor import before_jobs, passive

    before_jobs.check(
        level, devices_spec, out, force, _say, lambda c: print(passive.render(c), flush=True)
    )
