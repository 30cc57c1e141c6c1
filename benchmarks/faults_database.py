"""The fault campaign, the results database under faults (issue 40). `db ingest`
SIGKILLed (alone, and as the ingest that ends a `jobs --db` run), two ingests of one folder at
once, a truncated or damaged SQLite file, a read-only one, hostile results in an ingested
folder (SQLite and PostgreSQL), a schema from a newer milarun. Each ingest must be all or
nothing, a second one add nothing, every error one line, the database stay openable,
`history` and `db regressions` show no half-ingested run. The PostgreSQL server's own faults
are in faults_postgres.py (the throw-away server: postgres_server.py). Run by faults.py."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faultkit import Outcome, clean, milarun, one_line, plant, profile, start, wait_for
from postgres_server import Postgres, postgres

from fullfs import read_only_tmpfs
from resultfactory import result, run_folder, write

BIG = 3000  # results of the folder a kill lands in: its ingest lasts seconds


# -- the database as the scenarios look at it ---------------------------------------------
@dataclass(frozen=True)
class Held:
    """What a database holds: results per run (a run with none, or with fewer than its
    folder, would be a half-ingested one), and whether any result is there twice."""

    per_run: tuple[int, ...]
    duplicates: int

    @property
    def results(self) -> int:
        return sum(self.per_run)


def held(url: str) -> Held:
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("runs"):
                return Held((), 0)
            per_run = conn.execute(
                text(
                    "SELECT count(results.id) FROM runs LEFT JOIN results "
                    "ON results.run_id = runs.id GROUP BY runs.id ORDER BY runs.id"
                )
            )
            twice = text("SELECT count(*) - count(DISTINCT content_hash) FROM results")
            return Held(tuple(n for (n,) in per_run), int(conn.execute(twice).scalar() or 0))
    finally:
        engine.dispose()


def whole(found: Held, sizes: set[int]) -> bool:
    """Every run held whole (its folder's count of results), none twice."""
    return found.duplicates == 0 and all(n in sizes for n in found.per_run)


def readers_agree(db: str) -> tuple[bool, str]:
    """`history` and `db regressions` read the database: exit 0, no traceback."""
    done = [milarun("history", "--db", db), milarun("db", "regressions", "--db", db)]
    return all(
        d.returncode == 0 and clean(d) for d in done
    ), f"readers {[d.returncode for d in done]}"


def big_folder(tmp: Path, name: str = "big", n: int = BIG, started: float = 1.7e9) -> Path:
    return run_folder(tmp / name, {f"quick.t{i}": [100.0, 101.0] for i in range(n // 2)}, started)


def _sqlite(tmp: Path, name: str = "h.sqlite") -> str:
    return f"sqlite:///{tmp / name}"


def _kill_when(proc: subprocess.Popen, ready: Callable[[], bool]) -> bool:
    """SIGKILL ``proc`` once ``ready()``; whether it was still running then."""
    hit = wait_for(lambda: proc.poll() is not None or ready(), 120) and proc.poll() is None
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=300)  # a process in a disk write dies when the write ends
    return hit


def _writing(db: Path) -> Callable[[], bool]:
    """True while another process holds the SQLite file's write lock: an ingest inside its
    transaction (its BEGIN IMMEDIATE)."""

    def check() -> bool:
        if not db.exists():
            return False
        conn = sqlite3.connect(db, timeout=0)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.rollback()
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            conn.close()

    return check


def _committing(db: Path) -> Callable[[], bool]:
    """True once the write-ahead log holds pages: a transaction committing."""
    wal = db.with_name(db.name + "-wal")
    return lambda: wal.exists() and wal.stat().st_size > 0


# -- scenarios ------------------------------------------------------------------------------
def ingest_killed(tmp: Path) -> Outcome:
    """SIGKILL while `db ingest` reads the folder, inside its write transaction, and as it
    commits: nothing or the whole run each time; the next ingests add it once."""
    folder, path = big_folder(tmp), tmp / "h.sqlite"
    db = _sqlite(tmp)
    milarun("db", "ingest", run_folder(tmp / "first", {"quick.t0": [90.0]}, 1.6e9), "--db", db)
    moments: dict[str, Callable[[], bool]] = {
        "reading": lambda: True,  # after a second: its results are being read
        "in its transaction": _writing(path),
        "committing": _committing(path),
    }
    outcomes = {}
    for moment, ready in moments.items():
        proc = start("db", "ingest", folder, "--db", db)
        if moment == "reading":
            time.sleep(1.0)
        hit = _kill_when(proc, ready)
        found = held(db)
        outcomes[moment] = (hit, found.results - 1, whole(found, {1, BIG}))
    again = [milarun("db", "ingest", folder, "--db", db) for _ in range(2)]
    found = held(db)
    read_ok, said = readers_agree(db)
    ok = all(w for _, _, w in outcomes.values()) and all(d.returncode == 0 for d in again)
    ok = ok and all(clean(d) for d in again) and "0 result(s) added" in again[1].stdout
    ok = ok and found.per_run == (1, BIG) and found.duplicates == 0 and read_ok
    return (
        ok,
        max(0, BIG + 1 - found.results),
        "held after a kill "
        + ", ".join(f"{m} ({'hit' if h else 'missed'}): {n}" for m, (h, n, _) in outcomes.items())
        + f" (0 or {BIG}); after two ingests {found.per_run}, {found.duplicates} twice; {said}",
    )


def jobs_ingest_killed(tmp: Path) -> Outcome:
    """`jobs --db` SIGKILLed in the ingest that ends its run (into a folder an earlier run
    filled): the run's results stay in the folder; the database holds all or nothing of it,
    and `db ingest` of the folder then adds the rest once."""
    out = big_folder(tmp, "out")
    db, path = _sqlite(tmp), tmp / "h.sqlite"
    milarun("db", "ingest", run_folder(tmp / "first", {"quick.t0": [90.0]}, 1.6e9), "--db", db)
    prof = profile(tmp, run={"experiment": "faulty:steps", "arguments": {"--min-slices": 4}})
    proc = start("jobs", prof, "--devices", "cpu:1", "-o", out, "--db", db)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("database:"):
            break
    hit = _kill_when(proc, _writing(path))
    mine = len(list(out.glob("p.run.*.json")))
    found = held(db)
    kept = found.per_run in ((1,), (1, BIG + mine))
    again = milarun("db", "ingest", out, "--db", db)
    after = held(db)
    read_ok, said = readers_agree(db)
    ok = kept and mine == 1 and again.returncode == 0 and after.per_run == (1, BIG + mine)
    ok = ok and after.duplicates == 0 and read_ok
    return (
        ok,
        max(0, 1 - mine),
        f"killed mid-write {hit}; held {found.per_run}, after `db ingest` {after.per_run}; {said}",
    )


def _together(db: str, folder: Path) -> tuple[list[subprocess.CompletedProcess], Held]:
    procs = [start("db", "ingest", folder, "--db", db) for _ in range(2)]
    done = [
        subprocess.CompletedProcess(p.args, p.wait(timeout=300), *p.communicate()) for p in procs
    ]
    return done, held(db)


def two_ingests_at_once(tmp: Path, url: str | None = None) -> Outcome:
    """Two `db ingest` of one folder at the same moment into a new database: both end well,
    the schema is made once, the run is held once."""
    db = url or _sqlite(tmp)
    done, found = _together(db, big_folder(tmp))
    added = sorted(int(d.stdout.split("result(s) added")[0].split()[-1]) for d in done if d.stdout)
    ok = all(d.returncode == 0 and clean(d) for d in done) and found.per_run == (BIG,)
    ok = ok and found.duplicates == 0 and added == [0, BIG]
    return ok, max(0, BIG - found.results), f"exits {[d.returncode for d in done]}, added {added}"


def damaged_sqlite(tmp: Path) -> Outcome:
    """A database cut to half its size, one with pages overwritten, one that is no
    database: every command one line naming the file and saying what to do."""
    good = tmp / "good.sqlite"
    milarun("db", "ingest", big_folder(tmp), "--db", good)
    size = good.stat().st_size
    cut, torn, junk = tmp / "cut.sqlite", tmp / "torn.sqlite", tmp / "junk.sqlite"
    cut.write_bytes(good.read_bytes()[: size // 2])
    data = bytearray(good.read_bytes())
    data[size // 2 : size // 2 + 3 * 4096] = os.urandom(3 * 4096)
    torn.write_bytes(bytes(data))
    junk.write_bytes(os.urandom(8192))
    small = run_folder(tmp / "small", {"quick.t0": [90.0]}, 1.6e9)
    said = {}
    for path in (cut, torn, junk):
        runs = [milarun(*c, "--db", path) for c in (("history",), ("db", "regressions"))]
        runs.append(milarun("db", "ingest", small, "--db", path))
        # the ingest may write into pages it can still read: the readers must refuse it
        errs = [d for d in runs if d.returncode != 0]
        named = all(one_line(d) and str(path) in d.stderr for d in errs)
        hinted = all("recover" in d.stderr for d in errs)
        said[path.stem] = (len(errs) >= 2 and named and hinted, [d.returncode for d in runs])
    last = next((d.stderr.strip() for d in runs if d.returncode), "")
    return all(v for v, _ in said.values()), 0, f"{said}; {last[-120:]!r}"


def read_only_database(tmp: Path) -> Outcome:
    """The database on a read-only filesystem (a shared copy): `history`, `db regressions`,
    `report --machines` read it; `db ingest` is one line that says it cannot write there."""
    if os.geteuid() != 0:
        return True, 0, "skipped: needs root to mount a read-only filesystem"
    run = run_folder(tmp / "run", {"quick.t0": [90.0, 91.0]}, 1.6e9)
    with read_only_tmpfs(
        tmp / "ro", lambda d: milarun("db", "ingest", run, "--db", d / "h.sqlite")
    ) as disk:
        db = disk / "h.sqlite"
        reads = [milarun(*c, "--db", db) for c in (("history",), ("db", "regressions"),
                                                   ("report", "--machines", "node1"))]  # fmt: skip
        write = milarun("db", "ingest", big_folder(tmp), "--db", db)
    ok = all(d.returncode == 0 and clean(d) for d in reads) and one_line(write)
    ok = ok and "read-only" in write.stderr
    return (
        ok,
        0,
        f"readers {[d.returncode for d in reads]} "
        f"{next((d.stderr.strip()[-80:] for d in reads if d.returncode), '')!r}; ingest "
        f"{write.returncode}: {write.stderr.strip()[-90:]!r}",
    )


DEEP = '"' + "DEEP" + '"'


def hostile_results(tmp: Path) -> Outcome:
    """A folder whose results hold 100,000 nested lists, a 10 MB message, NaN and infinite
    rates, a time that is a word, a repeat that is a list, names past the columns' sizes:
    each is skipped with a line or kept within its column; the run ingests (SQLite and
    PostgreSQL alike) and a second ingest adds nothing."""
    folder = run_folder(tmp / "run", {"quick.good": [100.0, 101.0]}, 1.6e9)
    odd = {
        "deep": {"diagnostics": DEEP},
        "message": {"failure": {"kind": "crash", "message": "m" * 10_000_000}},
        "nan": {"rates": [float("nan")] * 24},
        "inf": {"rates": [float("inf")] * 24},
        "when": {"finished_at": "yesterday"},
        "repeat": {"repeat": [1]},
        "kind": {"failure": {"kind": "k" * 300, "message": "x"}},
        "gpu": {"gpu_identity": [{"id": "0", "uuid": "u" * 1000, "pci_bus_id": "b" * 999}]},
        "driver": {"system": {"driver": "d" * 1000}},
        "device": {"device": "cpu:" + "d" * 300},
        "name": {},
    }
    for i, (label, extra) in enumerate(odd.items()):
        kw = {k: extra.pop(k) for k in ("failure", "rates", "device") if k in extra}
        name = "quick." + ("x" * 300 if label == "name" else label)
        data = result(name, f"0.{i}", None if "failure" in kw else 100.0, **kw, **extra)
        path = plant(write(folder, data, f"h{i}.J0.{i}.20260101-000000-{i:06d}.json"))
        path.write_text(path.read_text().replace(DEEP, "[" * 100_000 + "]" * 100_000))
    urls = [_sqlite(tmp)]
    with postgres() as server:
        urls += [server.url] if isinstance(server, Postgres) else []
        said = []
        for url in urls:
            runs = [milarun("db", "ingest", folder, "--db", url) for _ in range(2)]
            found = held(url)
            fine = all(d.returncode == 0 and clean(d) for d in runs) and found.duplicates == 0
            fine = fine and len(found.per_run) == 1 and "0 result(s) added" in runs[1].stdout
            said.append((url.split(":")[0], fine, found.per_run, runs[0].stderr.strip()[-80:]))
    ok = all(f for _, f, _, _ in said) and len({p for _, _, p, _ in said}) == 1
    return ok, 0, "; ".join(f"{u}: held {p} {e!r}" for u, _, p, e in said)


def newer_schema(tmp: Path) -> Outcome:
    """A database whose Alembic revision this milarun does not know: refused in one line by
    every command, nothing written, its revision left as it was."""
    from sqlalchemy import create_engine, text

    db = _sqlite(tmp)
    folder = run_folder(tmp / "run", {"quick.t0": [90.0]}, 1.6e9)
    milarun("db", "ingest", folder, "--db", db)
    engine = create_engine(db)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    runs = [milarun(*c, "--db", db) for c in (("history",), ("db", "regressions"),
                                               ("db", "ingest", big_folder(tmp)))]  # fmt: skip
    with engine.connect() as conn:
        kept = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    engine.dispose()
    ok = all(one_line(d) and "newer milarun" in d.stderr for d in runs) and kept == "9999"
    return ok and held(db).per_run == (1,), 0, f"exits {[d.returncode for d in runs]}, rev {kept}"


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "db: ingest SIGKILLed": ingest_killed,
    "db: jobs --db SIGKILLed in its ingest": jobs_ingest_killed,
    "db: two ingests at once (SQLite)": two_ingests_at_once,
    "db: damaged SQLite file": damaged_sqlite,
    "db: read-only database": read_only_database,
    "db: hostile results": hostile_results,
    "db: schema of a newer milarun": newer_schema,
}
