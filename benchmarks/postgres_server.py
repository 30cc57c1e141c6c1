"""The throw-away PostgreSQL server of scripts/postgres-dev.sh for the benchmarks (the
results database's fault scenarios, faults_database.py and faults_postgres.py, and the
server's load test, server_load.py): started for a scenario, which may stop and start it,
or why there is none."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from faultkit import ROOT

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
