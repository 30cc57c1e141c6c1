"""The results server under load and faults (issue 47).

Load: N distinct run packages (tests/bidkit.py: 2 quick tests x 2 CPU slices, the harness's
own records) pushed to a real `milarun serve` (SQLite) on loopback, C at a time, each a real
HTTP upload that the server streams to disk, extracts, verifies (every rule, the evidence
rule deciding) and ingests; the pushes per second, the median and p99 latency, and that
every push is stored once (nothing lost). Bounded: N <= 200 and --seconds in all.

Faults (serverkit, which tests/server/test_faults.py runs too): the server SIGKILLed during an
upload (the client's retry completes it; nothing half stored); PostgreSQL stopped (503, the
client keeps its package and says so; pushed once it is back); the server's disk full (a
tmpfs, root only: 507, nothing stored).

    uv run python benchmarks/server_load.py [--pushes 40] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from postgres_server import postgres  # noqa: E402

import serverkit  # noqa: E402
from serverkit import Server  # noqa: E402


def load(tmp: Path, pushes: int, concurrency: int, seconds: float) -> bool:
    packages = [
        serverkit.package(serverkit.run_folder(tmp / f"run{i}", seed=i), tmp / f"run{i}.tar.gz")
        for i in range(pushes)
    ]
    server = Server(
        f"sqlite:///{tmp / 'load.sqlite'}", tmp / "load", extra=("--pushes-per-minute", "100000")
    ).start()
    try:
        key = server.key("lab-load")
        deadline = time.monotonic() + seconds

        def one(path: Path) -> tuple[float, int]:
            start = time.perf_counter()
            left = max(1.0, deadline - time.monotonic())
            answer = httpx.post(
                f"{server.url}/api/uploads",
                params={"name": path.stem},
                headers={"Authorization": f"Bearer {key}"},
                content=path.read_bytes(),
                timeout=left,
            )
            return time.perf_counter() - start, answer.status_code

        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            done = list(pool.map(one, packages))
        wall = time.perf_counter() - start
        latencies = [t for t, _ in done]
        codes = sorted({c for _, c in done})
        stored = len(httpx.get(f"{server.url}/api/runs").json())
    finally:
        server.stop()
    print(
        f"load: {pushes} pushes, {concurrency} at a time, in {wall:.1f} s: "
        f"{pushes / wall:.2f} pushes/s; latency median {statistics.median(latencies):.2f} s, "
        f"p99 {np.percentile(latencies, 99):.2f} s; status {codes}; {stored} stored, "
        f"{pushes - stored} lost"
    )
    return codes == [201] and stored == pushes


def faults(tmp: Path) -> bool:
    package = serverkit.package(serverkit.run_folder(tmp / "fault", seed=999), tmp / "f.tar.gz")
    ok = True
    server = Server(f"sqlite:///{tmp / 'killed.sqlite'}", tmp / "killed").start()
    try:
        found = serverkit.killed_mid_upload(server, package, server.key("lab-k"))
    finally:
        server.stop()
    print(f"killed mid-upload: {'PASS' if found[0] else 'FAIL'}: {found[1]}")
    ok &= found[0]
    with postgres() as pg:
        if isinstance(pg, str):
            print(f"database unreachable: {pg}")
        else:
            server = Server(pg.url, tmp / "pg").start()
            try:
                found = serverkit.database_unreachable(
                    server, package, server.key("lab-d"), pg.stop, pg.start
                )
            finally:
                server.stop()
            print(f"database unreachable: {'PASS' if found[0] else 'FAIL'}: {found[1]}")
            ok &= found[0]
    try:
        found = serverkit.disk_full_on_tmpfs(
            tmp / "full", f"sqlite:///{tmp / 'full.sqlite'}", package
        )
        print(f"full disk: {'PASS' if found[0] else 'FAIL'}: {found[1]}")
        ok &= found[0]
    except (PermissionError, OSError, subprocess.CalledProcessError) as err:  # needs root
        print(f"full disk: skipped ({err})")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pushes", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--no-faults", action="store_true")
    args = parser.parse_args()
    if not (1 <= args.pushes <= 200 and 1 <= args.concurrency <= 64):
        raise SystemExit("--pushes 1-200, --concurrency 1-64")
    with tempfile.TemporaryDirectory(prefix="milarun-server-load-") as tmp:
        ok = load(Path(tmp), args.pushes, args.concurrency, args.seconds)
        if not args.no_faults:
            ok &= faults(Path(tmp))
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
