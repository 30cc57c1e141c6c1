"""How much of a suite run measures, warm starts against cold starts (issue 36).

Runs `milarun jobs PROFILE` with warm starts (the default) and with `--cold-start`, turn
about (warm, cold, warm, cold, ...), and prints for each run its wall time, the share of it
that the tests' steady windows took ("measured") and that their timed slices took, and
polynome's launch to first slice; then each test's rate warm against cold, with the noise
that decides whether they differ: the two runs' steady-window 95% intervals combined, or,
with --rounds 2 or more, the larger spread of either start's runs around its mean.

    uv run python benchmarks/startup.py [--rounds 1] [--profile quick] [--devices cpu:1]
        [--name polynome ...] [--out FOLDER] [-- test arguments]
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from milarun import results
from milarun.results.read import ResultView

SLICE = 0.5  # seconds: DESIGN section 5


def run_once(args: argparse.Namespace, out: Path, cold: bool) -> float:
    command = [sys.executable, "-m", "milarun", "jobs", args.profile, "-o", str(out)]
    command += ["-d", str(Path(args.out) / "data"), "--devices", args.devices]
    command += ["--name", *args.name] if args.name else []
    command += ["--cold-start"] if cold else []
    command += ["--", *args.test_args] if args.test_args else []
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):
        sys.exit(f"jobs failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall


def read_run(out: Path) -> dict[str, dict]:
    """Each result's rate, its window's relative 95% interval, slices and start-up."""
    runs = {}
    for path in sorted(out.glob("*.json")):
        result = results.load_result(path)
        view = ResultView.from_dict(result)
        series = view.series()
        train = (result.get("diagnostics") or {}).get("train") or {}
        runs[f"{view.name} J{result['job_id']}"] = {
            "rate": view.rate() if result["success"] else None,
            "ci95": train.get("ci95"),
            "window_s": len(view.steady_window()) * SLICE,
            "timed_s": len(series.rates) * SLICE if series is not None else 0.0,
            "startup": result.get("startup") or {},
        }
    return runs


def noise(a: list[dict], b: list[dict]) -> float:
    """The relative difference the two starts' rates may show by chance."""
    if len(a) > 1 and len(b) > 1:
        return max(max(abs(r["rate"] / statistics.fmean(x["rate"] for x in runs) - 1)
                       for r in runs) for runs in (a, b))  # fmt: skip
    return math.hypot(a[0]["ci95"] or 0.0, b[0]["ci95"] or 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="warm and cold runs each")
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--devices", default="cpu:1")
    parser.add_argument("--name", nargs="*", default=[])
    parser.add_argument("--out", default=None, help="keep the results in this folder")
    parser.add_argument("test_args", nargs="*")
    args = parser.parse_args()
    args.out = args.out or tempfile.mkdtemp(prefix="milarun-startup-")
    found: dict[str, list[dict[str, dict]]] = {"warm": [], "cold": []}
    print(f"# `milarun jobs {args.profile} --devices {args.devices}`, results in {args.out}")
    print("run      wall s  measured  timed   polynome launch->first slice")
    for round_ in range(args.rounds):
        for start in ("warm", "cold"):
            out = Path(args.out) / f"{start}{round_}"
            wall = run_once(args, out, cold=start == "cold")
            runs = read_run(out)
            found[start].append(runs)
            window = sum(r["window_s"] for r in runs.values())
            timed = sum(r["timed_s"] for r in runs.values())
            poly = [r["startup"].get("to_first_slice") for k, r in runs.items() if "polynome" in k]
            first = f"{poly[0]:.2f} s" if poly and poly[0] is not None else "-"
            shares = f"{window / wall:7.1%}  {timed / wall:6.1%}"
            print(f"{start}{round_:<4} {wall:7.1f}  {shares}   {first}")
    print("\ntest                        warm rate     cold rate   warm/cold  noise   verdict")
    outside = 0
    for name in sorted(found["warm"][0]):
        warm = [runs[name] for runs in found["warm"] if runs.get(name, {}).get("rate")]
        cold = [runs[name] for runs in found["cold"] if runs.get(name, {}).get("rate")]
        if not warm or not cold:
            print(f"{name:26}  (failed in a run)")
            continue
        mean_warm = statistics.fmean(r["rate"] for r in warm)
        mean_cold = statistics.fmean(r["rate"] for r in cold)
        ratio = mean_warm / mean_cold
        limit = noise(warm, cold)
        same = abs(ratio - 1) <= limit
        outside += not same
        print(f"{name:26}  {mean_warm:11.2f}  {mean_cold:11.2f}  {ratio:8.3f}  "
              f"{limit:6.1%}  {'within' if same else 'OUTSIDE'}")  # fmt: skip
    print(f"\n{outside} test(s) outside their noise")


if __name__ == "__main__":
    main()
