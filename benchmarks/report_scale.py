"""How long do summary + report take on a big results folder?

Writes N realistic result files (20 tests x 8 GPUs x R repeats; each with a 120-slice rate
series, 60 s of 1 Hz GPU and CPU monitor samples, the environment and the system record),
then times, in one process: reading + summarising the folder, building the report (bootstrap
intervals on every test and the score, Welch verdicts against a baseline) and rendering it
as text. Also times the whole `milarun report` command and the HTML page at the largest N.
Target: 10,000 files in <= 5 s, time linear in N.

    uv run python benchmarks/report_scale.py [--repeats 8 16 32 63]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from milarun.report import summary  # noqa: E402
from milarun.report.build import build_report  # noqa: E402
from milarun.report.render import html  # noqa: E402
from milarun.report.render.text import to_text  # noqa: E402
from milarun.results.folder import load_dir  # noqa: E402
from resultfactory import rate_series, result, write  # noqa: E402

TESTS = 20
GPUS = 8
TARGET_FILES, TARGET_SECONDS = 10_000, 5.0


def monitors(rng: random.Random, gpu: int) -> dict:
    gpu_samples = [
        {
            "t": float(t),
            "gpus": {
                str(gpu): {
                    "load": rng.uniform(0.9, 1.0),
                    "memory": [rng.uniform(30000, 32000), 81920.0],
                    "temperature": rng.randint(50, 70),
                    "power": rng.uniform(300, 400),
                }
            },
        }
        for t in range(60)
    ]
    cpu_samples = [
        {
            "t": float(t),
            "cpu_percent": rng.uniform(90, 100),
            "rss_mb": rng.uniform(2000, 2100),
            "ram_used_percent": 20.0,
        }
        for t in range(60)
    ]
    return {
        "gpu_monitor": {"interval": 1.0, "samples": gpu_samples},
        "cpu_monitor": {"interval": 1.0, "samples": cpu_samples},
    }


def populate(folder: Path, repeats: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    count = 0
    for t in range(TESTS):
        base = 50.0 * (t + 1)
        for r in range(repeats):
            for g in range(GPUS):
                steady = base * rng.uniform(0.97, 1.03)
                data = result(
                    f"standard.test{t:02d}",
                    f"{r}.{g}",
                    None,
                    device=f"cuda:{g}",
                    rates=rate_series(steady, slices=120, noise=0.02, rng=rng),
                    environ={"CUDA_VISIBLE_DEVICES": str(g), "OMP_NUM_THREADS": "8"},
                    **monitors(rng, g),
                )
                write(folder, data)
                count += 1
    return count


def measure(
    folder: Path, weights: tuple[str, dict[str, float]], baseline: dict
) -> tuple[float, float, float]:
    """Seconds to load + summarise, to build the report, to render the text."""
    t0 = time.perf_counter()
    source = summary.load_source(folder)
    t1 = time.perf_counter()
    rep = build_report(
        source.summary, weights=weights, compare=("baseline", baseline), compare_gpus=True
    )
    t2 = time.perf_counter()
    to_text(rep)
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, nargs="+", default=[8, 16, 32, 63])
    args = parser.parse_args()
    weights = ("synthetic", {f"standard.test{t:02d}": 8.0 for t in range(TESTS)})
    rows = []
    # Warm up (lazy imports of scipy and friends) so the first N is not charged for them.
    warm = {
        "w.t": {
            "n": 2,
            "failures": 0,
            "train": {"n": 2, "mean": 1.0, "std": 0.1},
            "rates": [0.9, 1.1],
        }
    }
    build_report(warm, weights=("w", {"w.t": 1.0}), compare=("w", warm))
    with tempfile.TemporaryDirectory(prefix="milarun-scale-") as tmp:
        for repeats in args.repeats:
            folder = Path(tmp) / f"r{repeats}"
            count = populate(folder, repeats)
            size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
            # Same folder as baseline, summarised once (a baseline is a summary file).
            baseline = summary.summarize(load_dir(folder).results)
            load, build, text = measure(folder, weights, baseline)
            total = load + build + text
            rows.append((count, total))
            print(
                f"N={count:6d} files ({size:6.0f} MiB): load+summary {load:5.2f} s, "
                f"report {build:5.2f} s, text {text:5.3f} s, total {total:5.2f} s "
                f"({1e3 * total / count:.3f} ms/file)",
                flush=True,
            )
        biggest = folder
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "milarun", "report", str(biggest), "--compare-gpus"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        cli = time.perf_counter() - t0
        assert done.returncode == 0, done.stderr
        source = summary.load_source(biggest)
        rep = build_report(source.summary, weights=weights, compare_gpus=True, loaded=source.loaded)
        t0 = time.perf_counter()
        page = html.to_html(rep)
        page_time = time.perf_counter() - t0
    count, total = rows[-1]
    per_file = [t / n for n, t in rows]
    print(f"`milarun report` command at N={count}: {cli:.2f} s wall (process start included)")
    print(f"HTML page at N={count}: {page_time:.2f} s to render, {len(page) / 2**20:.1f} MiB")
    print(f"linearity: ms/file from {1e3 * min(per_file):.3f} to {1e3 * max(per_file):.3f}")
    scaled = total * TARGET_FILES / count
    verdict = "PASS" if scaled <= TARGET_SECONDS else "FAIL"
    print(f"target: {TARGET_FILES} files in <= {TARGET_SECONDS:.0f} s -> {scaled:.2f} s: {verdict}")


if __name__ == "__main__":
    main()
