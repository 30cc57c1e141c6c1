"""The figures of `milarun doctor --active`, beside the datasheet, as a markdown table.

Runs `milarun doctor --active LEVEL` on this machine (every GPU, else ``--devices``) and prints
each measurement (mean ± 95% CI, samples), its datasheet figure and share, the wall time of
the command, and the verdict; or, given ``--record FILE``, prints the table of a record
already written (e.g. by scripts/gpu-check.sh on a GPU machine).

    uv run python benchmarks/doctor_active.py [--level quick|full] [--devices SPEC]
    uv run python benchmarks/doctor_active.py --record gpu-check-results/doctor-active.*.json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from milarun.doctor.active import record, verdicts
from milarun.doctor.check import FAIL, PASS, WARN

SHEET = {
    "gemm_bf16": ("gemm", "bf16"),
    "gemm_fp16": ("gemm", "fp16"),
    "gemm_tf32": ("gemm", "tf32"),
    "gemm_fp8": ("gemm", "fp8"),
    "memory_bandwidth": ("memory", None),
}


def _datasheet(unit: dict[str, Any] | None, name: str) -> tuple[str, float] | None:
    if not unit or name not in SHEET:
        return None
    kind, precision = SHEET[name]
    if kind == "gemm":
        return verdicts.gemm_peak(unit.get("name"), precision or "")
    return verdicts.memory_peak(unit.get("name"), None)


def table(found: dict[str, Any]) -> list[str]:
    lines = [
        "| device | measurement | mean ± 95% CI | samples | datasheet | share |",
        "|---|---|---|---|---|---|",
    ]
    for label, metrics in found["measurements"].items():
        unit = found.get("units", {}).get(label)
        for name, m in metrics.items():
            figure = verdicts.Figure.of(m["samples"])
            sheet = _datasheet(unit, name)
            ds = f"{sheet[1]:,.4g} ({sheet[0]})" if sheet else "-"
            share = f"{figure.mean / sheet[1]:.0%}" if sheet else "-"
            lines.append(
                f"| {label} | {name} | {figure.mean:,.4g} ± {figure.ci:.2g} {m['unit']} | "
                f"{figure.n} | {ds} | {share} |"
            )
    counts = {s: sum(c["status"] == s for c in found["checks"]) for s in (PASS, WARN, FAIL)}
    lines.append("")
    lines.append(
        f"verdict {found['verdict']} ({counts[PASS]} {PASS}, {counts[WARN]} {WARN}, "
        f"{counts[FAIL]} {FAIL}), level {found['level']}, {found['seconds']:.1f} s of checks "
        f"on {found['node']}"
    )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", default="quick", choices=("quick", "full"))
    parser.add_argument("--devices", default=None)
    parser.add_argument("--record", type=Path, default=None)
    args = parser.parse_args()
    if args.record is not None:
        print("\n".join(table(record.read(args.record))))
        return 0
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "doctor.json"
        words = [sys.executable, "-m", "milarun", "doctor", "--active", args.level]
        words += ["--devices", args.devices] if args.devices else []
        start = time.perf_counter()
        done = subprocess.run([*words, "--json", str(path)], capture_output=True, text=True)
        wall = time.perf_counter() - start
        if not path.exists():
            print(done.stdout + done.stderr, file=sys.stderr)
            return 1
        print("\n".join(table(record.read(path))))
        print(f"`{' '.join(words[1:])}`: exit {done.returncode}, {wall:.1f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
