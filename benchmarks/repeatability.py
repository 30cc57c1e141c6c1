"""How repeatable is each test's rate? Runs the quick suite R times on one CPU slice.

Runs `milarun jobs quick --devices cpu:1 --repeat R` (every test R times, one after the
other, nothing else running), then prints each test's mean rate, std% across the R runs,
and its mean steady-window CV and worst drift. Record the table in benchmarks/README.md
with the date and the machine.

    uv run python benchmarks/repeatability.py [--repeat 5] [--name vae cart ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
import tempfile
from pathlib import Path

from milarun.machine import sysinfo
from milarun.report import summary
from milarun.report.build import build_report
from milarun.results.folder import load_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--name", nargs="*", default=[], help="only these quick jobs")
    parser.add_argument("--out", default=None, help="keep the results in this folder")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="milarun-repeat-"))
    command = [
        sys.executable,
        "-m",
        "milarun",
        "jobs",
        "quick",
        "--devices",
        "cpu:1",
        "--repeat",
        str(args.repeat),
        "-o",
        str(out / "results"),
        "-d",
        str(out / "data"),
    ]
    if args.name:
        command += ["--name", *args.name]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"jobs failed ({done.returncode}): {done.stderr[-2000:]}")
    summ = summary.summarize(load_dir(out / "results").results)
    rep = build_report(summ)
    quality = rep.quality
    system = sysinfo.system_record()
    cpu = system.get("cpu") or {}
    print(f"# repeatability: quick suite, cpu:1, {args.repeat} runs per test")
    print(
        f"# {dt.date.today().isoformat()}, {cpu.get('model')} x{cpu.get('count')}, "
        f"torch {system.get('torch')}; results in {out / 'results'}\n"
    )
    print("| test | runs (fail) | mean examples/s | std% | window CV% | worst drift% |")
    print("|---|---|---|---|---|---|")
    for test, row in rep.table.iterrows():
        q = quality.loc[test] if test in quality.index else None
        cv = f"{100 * q['cv']:.1f}" if q is not None else "-"
        drift = f"{100 * q['drift']:+.1f}" if q is not None else "-"
        print(
            f"| {test} | {int(row['n'])} ({int(row['fail'])}) | {row['perf']:,.2f} | "
            f"{row['std%']:.2f} | {cv} | {drift} |"
        )


if __name__ == "__main__":
    main()
