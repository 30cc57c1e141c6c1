"""`milarun report` on one fleet run of 100 nodes: about 100,000 result files.

Writes NODES node folders (``nodes/<node>/``, as `slurm gather` lays them out) of 8 GPUs x the
standard suite's 25 weighted tests (so that the report is scored, as a real one is; each a
single-process result, scaling.k too) x R repeats of realistic results (120-slice rate series,
60 s of 1 Hz GPU and CPU monitor samples each, the environment and the system record), then
runs the real commands in their own process and reports wall time and peak memory (the RSS of
the command and its workers together): `milarun report FOLDER --compare-gpus` (text) on the
files alone, then each node folder's digest written as the node's `slurm gather` (or its
`milarun jobs`) writes it at the end of its task (milarun.results.digest), then the text report
and `milarun report FOLDER --html PAGE` on the folder as a fleet run leaves it.
Targets (issue 27): the text report in <= 20 s and <= 2 GB; the page stays usable.

    uv run python benchmarks/report_fleet.py [--nodes 100] [--repeats 5] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report_scale import monitors  # noqa: E402

from milarun.report import weights  # noqa: E402
from milarun.results import bulk  # noqa: E402
from resultfactory import rate_series, result, write  # noqa: E402

TESTS = list(weights.load_weights("standard")[1])  # the score's bootstrap is a real report's
GPUS = 8
TARGET_SECONDS, TARGET_GIB = 20.0, 2.0


def populate(folder: Path, nodes: int, repeats: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    count = 0
    for n in range(nodes):
        node = f"gpu{n:03d}"
        where = folder / "nodes" / node
        for t, test in enumerate(TESTS):
            base = 50.0 * (t + 1)
            for r in range(repeats):
                for g in range(GPUS):
                    data = result(
                        test,
                        f"{r}.{g}",
                        None,
                        device=f"cuda:{g}",
                        node=node,
                        rates=rate_series(
                            base * rng.uniform(0.97, 1.03), slices=120, noise=0.02, rng=rng
                        ),
                        environ={"CUDA_VISIBLE_DEVICES": str(g), "OMP_NUM_THREADS": "8"},
                        **monitors(rng, g),
                    )
                    write(where, data)
                    count += 1
    return count


def timed(*args: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds and peak memory (GiB: the largest sum of RSS over the command and its
    worker processes, sampled every 50 ms with psutil) of one milarun command."""
    t0 = time.perf_counter()
    command = psutil.Popen(
        [sys.executable, "-m", "milarun", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0
    with ThreadPoolExecutor(1) as pool:  # drain the pipes while sampling
        output = pool.submit(command.communicate)
        while not output.done():
            try:
                tree = [command, *command.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree))
            except psutil.NoSuchProcess:
                pass
            time.sleep(0.05)
        stdout, stderr = output.result()
    wall = time.perf_counter() - t0
    done = subprocess.CompletedProcess(command.args, command.returncode, stdout, stderr)
    return wall, peak / 2**30, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3, help="timed reports with digests")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="milarun-fleet-") as tmp:
        folder = Path(tmp) / "fleet"
        t0 = time.perf_counter()
        count = populate(folder, args.nodes, args.repeats)
        size = sum(f.stat().st_size for f in folder.rglob("*.json")) / 2**20
        print(
            f"{count} result files ({size:.0f} MiB) on {args.nodes} nodes written in "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        wall, gib, done = timed("report", str(folder), "--compare-gpus")
        assert done.returncode == 0, done.stderr[-2000:]
        print(f"`milarun report --compare-gpus`, the files alone: {wall:.1f} s, {gib:.2f} GiB")
        t0 = time.perf_counter()
        each = []
        for node in sorted((folder / "nodes").iterdir()):
            start = time.perf_counter()
            assert bulk.write_digest(node) is not None, node
            each.append(time.perf_counter() - start)
        print(
            f"digests written ({len(each)} nodes, each on its own node in a fleet run): "
            f"{statistics.median(each):.2f} s a node ({time.perf_counter() - t0:.0f} s here)",
            flush=True,
        )
        # A VM's speed drifts by a fifth from one minute to the next: the median of --runs.
        figures = [timed("report", str(folder), "--compare-gpus") for _ in range(args.runs)]
        assert all(done.returncode == 0 for *_, done in figures), figures[0][2].stderr[-2000:]
        assert "coverage 100%" in figures[0][2].stdout, "the report should score every test"
        walls = sorted(wall for wall, *_ in figures)
        wall, gib = statistics.median(walls), max(gib for _, gib, _ in figures)
        verdict = "PASS" if wall <= TARGET_SECONDS and gib <= TARGET_GIB else "FAIL"
        print(
            f"`milarun report --compare-gpus`: {wall:.1f} s (median of {len(walls)}: "
            f"{', '.join(f'{w:.1f}' for w in walls)}), peak RSS {gib:.2f} GiB: {verdict}"
        )
        page = Path(tmp) / "fleet.html"
        wall, gib, done = timed("report", str(folder), "--html", str(page))
        assert done.returncode == 0, done.stderr[-2000:]
        print(
            f"`milarun report --html`: {wall:.1f} s, peak RSS {gib:.2f} GiB, "
            f"page {os.path.getsize(page) / 2**20:.1f} MiB"
        )


if __name__ == "__main__":
    main()
