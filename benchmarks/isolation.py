"""Do student cgroups keep each instance at its solo speed?

Runs a CPU-bound test (polynome, one thread) alone on one core, then two instances side by
side on cpu:2 without cgroups and with student cgroups, and prints each instance's steady
rate as a fraction of the solo rate. Target: with cgroups each keeps >= 95%. Needs root and
cgroup v1 (or v2 with cpuset and memory); groups are made under a temporary parent.

    sudo uv run python benchmarks/isolation.py [--min-slices 30]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from milarun.results import steady

TEST = "milabench.models.polynome:main"
CGROUP = "cpuset,memory:student{CUDA_VISIBLE_DEVICES}"


def milarun(*args: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "milarun", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        raise SystemExit(f"milarun {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def rates(folder: Path) -> dict[str, float]:
    out = {}
    for path in sorted(folder.glob("*.json")):
        result = json.loads(path.read_text())
        out[result["device"]] = steady.rate(result["timings"]["train"]["rates"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--min-slices", type=int, default=30, help="length of each run in 0.5 s slices"
    )
    args = parser.parse_args()
    test_args = ["--", "--min-slices", str(args.min_slices)]
    parent = f"milarun-bench-{uuid.uuid4().hex[:6]}"
    env = {"MILARUN_CGROUP_PARENT": parent, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        profile = tmp / "iso.json"
        profile.write_text(
            json.dumps(
                {
                    "polynome": {
                        "experiment": TEST,
                        "partition_scheme": {"type": "per-gpu", "cgroup": CGROUP},
                    }
                }
            )
        )
        # Solo: one instance, one thread, pinned to core 0.
        solo_dir = tmp / "solo"
        subprocess.run(
            [
                "taskset",
                "-c",
                "0",
                sys.executable,
                "-m",
                "milarun",
                "run",
                TEST,
                "-o",
                str(solo_dir),
                *test_args,
            ],
            check=True,
            capture_output=True,
            env={**os.environ, **env, "CUDA_VISIBLE_DEVICES": "", "MILARUN_DEVICE": "cpu:0"},
        )
        solo = rates(solo_dir)["cpu:0"]
        milarun(
            "jobs",
            str(profile),
            "--devices",
            "cpu:2",
            "--no-cgexec",
            "-o",
            str(tmp / "free"),
            *test_args,
            env=env,
        )
        milarun("cgroups", "setup", "--devices", "cpu:2", env=env)
        try:
            milarun(
                "jobs",
                str(profile),
                "--devices",
                "cpu:2",
                "-o",
                str(tmp / "iso"),
                *test_args,
                env=env,
            )
        finally:
            milarun("cgroups", "teardown", "--devices", "cpu:2", env=env)
        print(f"solo on one core: {solo:,.0f} examples/s")
        print(f"{'setting':<16} {'instance':<9} {'examples/s':>12} {'of solo':>8}")
        worst = float("inf")
        for label, folder in (("no cgroups", "free"), ("student cgroups", "iso")):
            for device, rate in sorted(rates(tmp / folder).items()):
                print(f"{label:<16} {device:<9} {rate:12,.0f} {rate / solo:8.1%}")
                if folder == "iso":
                    worst = min(worst, rate / solo)
        verdict = "PASS" if worst >= 0.95 else "FAIL"
        print(
            f"with cgroups the slowest instance keeps {worst:.1%} of solo: {verdict} "
            "(target >= 95%)"
        )


if __name__ == "__main__":
    main()
