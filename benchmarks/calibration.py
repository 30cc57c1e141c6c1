"""How accurate is the harness? Run the calibration test through `milarun run`.

The calibration workload spins for --step-time seconds per step of --batch-size examples,
so its true rate is known on an idle machine. This prints, for several step times, the
measured steady rate, its error against the true rate and against the steps' own timing
(the test's `own_rate`, meaningful on a busy machine too), and the time outside blocks.

    uv run python benchmarks/calibration.py [--seconds 15]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from milarun.results import steady

STEP_TIMES = (0.001, 0.005, 0.010)
BATCH = 64


def measure(step_time: float, seconds: float, outdir: Path) -> dict:
    out = outdir / f"calibration-{step_time}.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "milarun",
            "run",
            "milabench.models.calibration:main",
            "-o",
            str(out),
            "--",
            "--batch-size",
            str(BATCH),
            "--step-time",
            str(step_time),
            "--min-slices",
            str(max(5, round(seconds / 0.5))),
        ],
        check=True,
        capture_output=True,
    )
    result = json.loads(out.read_text())
    train = result["timings"]["train"]
    true_rate = BATCH / step_time
    measured = steady.rate(train["rates"])
    return {
        "step_ms": step_time * 1000,
        "true_rate": true_rate,
        "measured": measured,
        "error_pct": 100 * (measured / true_rate - 1),
        "own_error_pct": 100 * result["metrics"]["rate_error"],
        "outside_blocks_pct": 100 * train["overhead"] / train["duration"],
        "slices": len(train["rates"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--seconds",
        type=float,
        default=15.0,
        help="in-block seconds of each run (its --min-slices)",
    )
    args = parser.parse_args()
    print(
        f"{'step ms':>8} {'true ex/s':>12} {'measured':>12} {'error %':>9} "
        f"{'vs own %':>9} {'outside %':>10} {'slices':>7}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for step_time in STEP_TIMES:
            row = measure(step_time, args.seconds, Path(tmp))
            print(
                f"{row['step_ms']:8.1f} {row['true_rate']:12,.0f} {row['measured']:12,.1f} "
                f"{row['error_pct']:9.3f} {row['own_error_pct']:9.3f} "
                f"{row['outside_blocks_pct']:10.3f} {row['slices']:7d}"
            )


if __name__ == "__main__":
    main()
