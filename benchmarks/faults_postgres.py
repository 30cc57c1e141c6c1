"""The fault campaign, the PostgreSQL server under faults (issue 40; the results database's
other faults are in faults_part5.py): two ingests of one folder at once, the server stopped
(immediate) while an ingest writes, a server down or frozen (SIGSTOP) when a command starts.
The server is the throw-away one of scripts/postgres-dev.sh (skipped, with why, where it
cannot start), which a scenario may stop and start. Run by faults.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from faultkit import ROOT, Outcome, milarun, one_line, start, wait_for
from faults_part5 import BIG, big_folder, held, two_ingests_at_once

from resultfactory import run_folder

SCRIPT = ROOT / "scripts" / "postgres-dev.sh"


@dataclass
class Postgres:
    """The throw-away server (scripts/postgres-dev.sh), which a scenario may stop and start."""

    url: str
    folder: Path

    def _ctl(self, *args: str) -> None:
        bin_dir = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
        owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*owner, str(bin_dir / "pg_ctl"), "-D", str(self.folder / "data"), *args],
                       capture_output=True, timeout=120, check=True)  # fmt: skip

    def stop(self) -> None:
        self._ctl("-m", "immediate", "-w", "stop")

    def start(self) -> None:
        port = (self.folder / "port").read_text().strip()
        options = f"-h 127.0.0.1 -p {port} -k {self.folder} -c fsync=off"
        self._ctl("-l", str(self.folder / "server.log"), "-w", "-t", "60", "-o", options, "start")

    def postmaster(self) -> int:
        return int((self.folder / "data" / "postmaster.pid").read_text().split()[0])


@contextlib.contextmanager
def postgres() -> Iterator[Postgres | str]:
    """A server for the scenario, or why there is none."""
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        yield "skipped: PostgreSQL is not installed (apt-get install postgresql)"
        return
    top = Path(tempfile.mkdtemp(prefix="milarun-pg-"))
    top.chmod(0o755)  # the server's user must reach it
    env = {**os.environ, "MILARUN_POSTGRES_DEV": str(top / "server")}
    up = subprocess.run([SCRIPT, "up"], capture_output=True, text=True, env=env, timeout=120)
    try:
        if up.returncode != 0:
            yield f"skipped: the throw-away PostgreSQL did not start: {up.stderr.strip()[-100:]}"
        else:
            yield Postgres(up.stdout.strip(), top / "server")
    finally:
        subprocess.run([SCRIPT, "down"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(top, ignore_errors=True)


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
