"""Does the results database stay usable after a year of a fleet checked every week?

Makes a synthetic year: WEEKS weekly runs of a fleet of NODES nodes x GPUS GPUs running
TESTS tests (52 x 100 x 8 x 19 = 790,400 results by default), each result a real result
record (tests/resultfactory: the harness's own builder) with its 24-slice rate series, its
node, its GPU's UUID, the driver of the week. One GPU (node017, GPU 3) loses 6% from the
driver update of week 40 on: the history of that GPU must call it.

Prints, for the database given (default: a new SQLite file in a temporary folder):
- ingest: results/s of `db ingest`'s write path (row_of: content hash, steady window, setup
  hash; then one transaction per weekly run), results already loaded in memory;
- with --files: the whole `milarun db ingest` command on one week's folder of files;
- the database size;
- the history of one test over the year: per machine (52 points), per GPU (41,600 points),
  and `db regressions` over the last 8 weeks, each query + verdicts, timed.
Targets (issue 27): ingest >= 1,000 results/s into SQLite; one test's history < 1 s.

    uv run python benchmarks/history_scale.py [--weeks 52 --nodes 100 --tests 19] [--db URL]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from milarun.history import ingest, store, trends  # noqa: E402
from milarun.results import manifest  # noqa: E402
from resultfactory import SYSTEM, rate_series, result, write  # noqa: E402

GPUS = 8
WEEK = 7 * 86_400.0
YEAR_START = 1_767_225_600.0  # 2026-01-01
SLOW_NODE, SLOW_GPU, SLOW_FROM, SLOW_BY = 17, 3, 40, 0.06
TARGET_RATE, TARGET_QUERY = 1_000.0, 1.0


def node_name(node: int) -> str:
    return f"node{node:03d}"


def uuid(node: int, gpu: int) -> str:
    return f"GPU-{node:04d}{gpu:04d}-0000-0000-0000-000000000000"


def week_results(week: int, nodes: int, tests: int, rng: random.Random) -> list[dict]:
    """One weekly fleet run: every test on every GPU of every node."""
    driver = "550.54" if week < SLOW_FROM else "560.28"
    template = result("fleet.t00", "0.0", 100.0, device="cuda:0")
    finished = YEAR_START + week * WEEK + 3600
    system = {**SYSTEM, "driver": driver}
    timings, train = template["timings"], template["timings"]["train"]

    def series(steady: float) -> list[float]:
        return rate_series(steady, noise=0.02, rng=rng)

    found = []
    for node in range(nodes):
        for gpu in range(GPUS):
            slow = node == SLOW_NODE and gpu == SLOW_GPU and week >= SLOW_FROM
            for test in range(tests):
                base = 100.0 * (1 + test) * (1 - SLOW_BY if slow else 1.0)
                steady = base * rng.gauss(1.0, 0.01)
                data = dict(template)  # shallow: what differs is replaced below
                data.update(
                    name=f"fleet.t{test:02d}",
                    job_id=f"0.{gpu}",
                    device=f"cuda:{gpu}",
                    devices=[f"cuda:{gpu}"],
                    node=node_name(node),
                    hostname=node_name(node),
                    finished_at=finished + test * 60,
                    gpu_identity=[
                        {"id": str(gpu), "uuid": uuid(node, gpu), "pci_bus_id": None, "note": None}
                    ],
                    system=system,
                    timings={**timings, "train": {**train, "rates": series(steady)}},
                )
                found.append(data)
    return found


def week_run(week: int, results: list[dict]) -> ingest.RunInput:
    started = YEAR_START + week * WEEK
    rows = [ingest.row_of(d, started) for d in results]
    return ingest.RunInput(
        source=f"/fleet/week{week:02d}",
        machine="fleet",
        system=results[0]["system"],
        manifests=[{"host": "head", "started_at": started, "pid": week, "profile": "fleet"}],
        rows=rows,
    )


def timed(what: str, call):  # noqa: ANN001, ANN201 (a benchmark's helper)
    start = time.perf_counter()
    found = call()
    seconds = time.perf_counter() - start
    print(f"{what}: {seconds:.2f} s")
    return found, seconds


def query(engine, filters: trends.Filters, by: str):  # noqa: ANN001, ANN201
    with store.session(engine) as session:
        return trends.history(session, filters, trends.Options(by=by))


def files_ingest(folder: Path, week: int, nodes: int, tests: int, db: str) -> None:
    """The whole `milarun db ingest` command on one week written as files."""
    results = week_results(week, nodes, tests, random.Random(week))
    folder.mkdir(parents=True, exist_ok=True)
    started = manifest.ManifestWriter.start(folder, "fleet", [], 1, ["cuda:0"])
    started.finish("complete")
    for data in results:
        write(folder / data["node"], data)
    begin = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "milarun", "db", "ingest", str(folder), "--db", db],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    seconds = time.perf_counter() - begin
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    print(
        f"`milarun db ingest` of one week's {len(results):,} result files: {seconds:.1f} s, "
        f"{len(results) / seconds:,.0f} files/s ({done.stdout.strip()[-80:]})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weeks", type=int, default=52)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--tests", type=int, default=19)
    parser.add_argument("--db", help="a database URL (default: a new SQLite file)")
    parser.add_argument("--files", action="store_true", help="also time the command on files")
    parser.add_argument(
        "--queries-only", action="store_true", help="--db already holds the year: time queries"
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="history-scale-"))
    url = args.db or f"sqlite:///{folder / 'history.sqlite'}"
    engine = store.open_db(url)
    total = args.weeks * args.nodes * GPUS * args.tests
    print(f"{args.weeks} weeks x {args.nodes} nodes x {GPUS} GPUs x {args.tests} tests")
    rng = random.Random(20260101)
    ingest_seconds = 0.0
    for week in range(0 if args.queries_only else args.weeks):
        run = week_results(week, args.nodes, args.tests, rng)  # made, not timed
        start = time.perf_counter()
        done = ingest.ingest(engine, week_run(week, run))
        ingest_seconds += time.perf_counter() - start
        assert done.added == len(run), done
    if not args.queries_only:
        print(
            f"ingest: {total:,} results in {ingest_seconds:.1f} s = "
            f"{total / ingest_seconds:,.0f} results/s (target >= {TARGET_RATE:,.0f})"
        )
    if engine.dialect.name == "sqlite" and not args.queries_only:
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        size = (folder / "history.sqlite").stat().st_size
        print(f"database size: {size / 2**20:,.0f} MiB ({size / total:,.0f} bytes/result)")
    test = "fleet.t00"
    for when in ("cold: the process's first query, scipy's import included", "warm"):
        series, seconds = timed(
            f"history of {test} over the year, per machine ({when})",
            lambda: query(engine, trends.Filters(test=test), "test"),
        )
    print(f"  {sum(map(len, series.values()))} points; target < {TARGET_QUERY} s")
    series, _ = timed(
        f"history of {test} over the year, per GPU",
        lambda: query(engine, trends.Filters(test=test), "gpu"),
    )
    found = trends.alerts(series, (trends.REGRESSION,))
    print(f"  {sum(map(len, series.values())):,} points; regressions: {len(found)}")
    for point in found[:3]:
        print(f"    {point.series} week {int((point.when - YEAR_START) // WEEK)}: {point.notes}")
    since = YEAR_START + (args.weeks - 8) * WEEK
    series, _ = timed(
        "db regressions over the last 8 weeks (every test, per machine)",
        lambda: query(engine, trends.Filters(since=since), "test"),
    )
    if args.files:
        files_ingest(folder / "files", args.weeks, args.nodes, args.tests, url)
    engine.dispose()
    print(f"(database and files in {folder}; remove it when done)")


if __name__ == "__main__":
    main()
