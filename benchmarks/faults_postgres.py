"""The fault campaign, the PostgreSQL server under faults (issue 40; the results database's
other faults are in faults_database.py): two ingests of one folder at once, the server stopped
(immediate) while an ingest writes, a server down or frozen (SIGSTOP) when a command starts.
The server is the throw-away one of scripts/postgres-dev.sh (postgres_server.py; skipped,
with why, where it cannot start), which a scenario may stop and start. Run by faults.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from faultkit import Outcome, milarun, one_line, start, wait_for
from faults_database import BIG, big_folder, held, two_ingests_at_once
from postgres_server import postgres

from resultfactory import run_folder


def pg_two_ingests(tmp: Path) -> Outcome:
    with postgres() as server:
        if isinstance(server, str):
            return True, 0, server
        return two_ingests_at_once(tmp, server.url)


def _pg_writing(url: str) -> Callable[[], bool]:
    """True once another connection to the server is inside a transaction that wrote."""
    import psycopg

    plain = url.replace("postgresql+psycopg://", "postgresql://")

    def check() -> bool:
        with psycopg.connect(plain, autocommit=True) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND "
                "backend_xid IS NOT NULL"
            ).fetchone()
        return bool(found and found[0])

    return check


def pg_stopped_mid_ingest(tmp: Path) -> Outcome:
    """PostgreSQL stopped (immediate) while an ingest writes: one line; once it is back,
    nothing of the run, then the run once."""
    with postgres() as server:
        if isinstance(server, str):
            return True, 0, server
        folder = big_folder(tmp)
        milarun(
            "db", "ingest", run_folder(tmp / "a", {"quick.t0": [90.0]}, 1.6e9), "--db", server.url
        )
        proc = start("db", "ingest", folder, "--db", server.url)
        hit = wait_for(lambda: proc.poll() is not None or _pg_writing(server.url)(), 120)
        server.stop()
        stdout, stderr = proc.communicate(timeout=120)
        cut = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        server.start()
        found = held(server.url)
        again = milarun("db", "ingest", folder, "--db", server.url)
        after = held(server.url)
        ok = hit and one_line(cut) and found.per_run == (1,) and after.per_run == (1, BIG)
        return (
            ok and again.returncode == 0 and after.duplicates == 0,
            max(0, BIG + 1 - after.results),
            f"stopped while it wrote: {hit}; exit {cut.returncode}: {stderr.strip()[-100:]!r}; "
            f"held {found.per_run}, then {after.per_run}",
        )


def pg_unreachable(tmp: Path) -> Outcome:
    """No server listening, then a server that accepts and never answers (SIGSTOPped): each
    command ends within a minute, in one line, nothing written."""
    with postgres() as server:
        if isinstance(server, str):
            return True, 0, server
        folder = run_folder(tmp / "run", {"quick.t0": [90.0]}, 1.6e9)
        server.stop()
        down = [
            milarun(*c, "--db", server.url, timeout=90)
            for c in (("db", "ingest", folder), ("history",))
        ]
        server.start()
        os.kill(server.postmaster(), signal.SIGSTOP)
        began = time.monotonic()
        try:
            frozen = [milarun("db", "ingest", folder, "--db", server.url, timeout=90)]
        except subprocess.TimeoutExpired:
            frozen = []
        finally:
            os.kill(server.postmaster(), signal.SIGCONT)
        waited = time.monotonic() - began
        runs = down + frozen
        ok = len(frozen) == 1 and all(one_line(d) for d in runs) and held(server.url).results == 0
        return (
            ok,
            0,
            f"exits {[d.returncode for d in runs]} (frozen server: {waited:.0f} s"
            f"{'' if frozen else ', still waiting: killed'}): "
            f"{(runs[-1].stderr.strip() if runs else '')[-110:]!r}",
        )


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "db: two ingests at once (PostgreSQL)": pg_two_ingests,
    "db: PostgreSQL stopped mid-ingest": pg_stopped_mid_ingest,
    "db: PostgreSQL unreachable": pg_unreachable,
}
