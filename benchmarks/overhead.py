"""What does the harness cost, and is its rate right? `milarun selftest`, for the record.

Runs the selftest (calibration spin steps of 0.1, 1 and 10 ms, each through the
Experiment API with the monitor threads of a real run and as a bare loop) and prints the
machine, the date, the load and the table, so the figures can be pasted into a report.

    uv run python benchmarks/overhead.py [--seconds 4] [--repeat 2]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys

from milarun.machine import sysinfo
from milarun.measure import selftest


def header() -> str:
    """Machine, software and date: what the figures below depend on."""
    system = sysinfo.system_record()
    cpu = system["cpu"]
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{now}  {system['hostname']}\n"
        f"cpu: {cpu['model']} ({cpu['count']} logical, {cpu['physical']} physical)\n"
        f"python {system['python']}, torch {system['torch']}, milarun {system['milarun']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=selftest.DEFAULT_SECONDS,
        help="seconds per step time and way",
    )
    parser.add_argument("--repeat", type=int, default=1, help="run the selftest this often")
    args = parser.parse_args(argv)
    print(header())
    worst = 0
    for run in range(1, args.repeat + 1):
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"\nrun {run}/{args.repeat}  (load average before: {load})", flush=True)
        measurements = selftest.run_selftest(args.seconds)
        print(selftest.render_text(measurements), end="", flush=True)
        worst = max(worst, selftest.exit_code(measurements))
    return worst


if __name__ == "__main__":
    sys.exit(main())
