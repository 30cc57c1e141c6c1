"""A real results server for the server tests and benchmarks/server_load.py: `milarun serve`
started on a free loopback port, its admin key read from what it prints, keys made with the
real `milarun serve keys add`, run folders made by bidkit (no suite run)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

import bidkit
from conftest import ROOT, cli_env, milarun
from fullfs import fill_up, full_tmpfs

RATES = {"quick.polynome": 5000.0, "quick.sine_wave": 3000.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    db: str
    root: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    admin: str = ""
    extra: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.root.parent / f"serve-{self.port}.log"

    def start(self, timeout: float = 60) -> Server:
        """Start it (again: the same database, root and port) and wait until it answers; what
        it prints goes to ``log`` (a pipe nobody read would stop it once full)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "milarun", "serve", "--port", str(self.port),
                    "--db", self.db, "--root", str(self.root), *self.extra,
                ],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True, env=cli_env(),
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"milarun serve ended: {self.log.read_text()}"
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise AssertionError(f"milarun serve did not answer in {timeout} s")
        keys = [ln for ln in self.log.read_text().splitlines() if ln.startswith("mrk_")]
        self.admin = keys[0] if keys else self.admin  # printed at its first start only
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash would (no clean shutdown)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def key(self, site: str, *options: str) -> str:
        """A new key through `milarun serve keys add` (its last line)."""
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "milarun",
                "serve",
                "keys",
                "add",
                "--site",
                site,
                "--db",
                self.db,
                *options,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=cli_env(),
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]


def push(
    server: Server,
    source: Path,
    key: str,
    *options: str,
    cache: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """`milarun push SOURCE --server URL` with the key in $MILARUN_KEY."""
    env = {"MILARUN_KEY": key}
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    return milarun("push", str(source), "--server", server.url, *options, env=env, timeout=timeout)


def run_folder(folder: Path, seed: int = 0, rates: dict[str, float] | None = None) -> Path:
    """A `milarun jobs quick` folder of known rates (bidkit: the harness's own records)."""
    return bidkit.synthetic_run(folder, rates or RATES, devices=2, repeat=1, seed=seed)


def package(folder: Path, out: Path, tender: Path | None = None) -> Path:
    from milarun.tender.package import make_package

    make_package(folder, out, tender)
    return out


def uploads_of(db: str, content_hash: str | None = None) -> int:
    """Uploads in the server's database (of these bytes only, when given)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            where = " WHERE content_hash = :h" if content_hash else ""
            return int(
                conn.execute(
                    text(f"SELECT count(*) FROM uploads{where}"), {"h": content_hash}
                ).scalar_one()
            )
    finally:
        engine.dispose()


def half_then_wait(body: bytes, release: threading.Event):  # noqa: ANN202 (a generator)
    yield body[: len(body) // 2]
    release.wait(60)
    yield body[len(body) // 2 :]


def killed_mid_upload(server: Server, package: Path, key: str) -> tuple[bool, str]:
    """The server SIGKILLed while half the package is in: nothing stored; `milarun push`
    started while it is down retries until it is back, and the package is stored once."""
    from milarun.server.client import sha256_of

    body, digest = package.read_bytes(), sha256_of(package)
    release = threading.Event()
    failed: list[BaseException] = []

    def send() -> None:
        try:
            httpx.post(
                f"{server.url}/api/uploads",
                headers={"Authorization": f"Bearer {key}"},
                content=half_then_wait(body, release),
                timeout=60,
            )
        except httpx.TransportError as err:
            failed.append(err)

    sender = threading.Thread(target=send)
    sender.start()
    deadline = time.monotonic() + 30
    while not any(p.stat().st_size for p in (server.root / "spool").glob("*.part")):
        assert time.monotonic() < deadline, "the upload never reached the server"
        time.sleep(0.05)
    server.kill()
    release.set()
    sender.join(60)
    if uploads_of(server.db, digest):
        return False, "a half upload was stored"
    retry = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "milarun",
            "push",
            str(package),
            "--server",
            server.url,
            "--retries",
            "8",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env({"MILARUN_KEY": key}),
    )
    time.sleep(1.0)  # its first try finds no server
    server.start()
    out, err = retry.communicate(timeout=300)
    stored = uploads_of(server.db, digest)
    spool = list((server.root / "spool").iterdir())
    ok = (
        retry.returncode == 0
        and "accepted" in out
        and "retry 1 of 8" in err
        and stored == 1
        and bool(failed)
        and not spool
    )
    return ok, f"exit {retry.returncode}, stored {stored}, spool {len(spool)}: {out.strip()[:200]}"


def refused_then_stored(
    server: Server,
    package: Path,
    key: str,
    fault: tuple[Callable[[], None], Callable[[], None]],
    said: str,
    retries: int,
) -> tuple[bool, str]:
    """``fault`` (make it, mend it) made: the push fails in one line holding ``said`` and
    where its package is kept, nothing stored; mended, the same package is pushed and stored."""
    from milarun.server.client import sha256_of

    make, mend = fault
    make()
    try:
        done = push(server, package, key, "--retries", str(retries))
    finally:
        mend()
    line = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    refused = (
        said in line
        and f"the package is kept: {package}" in line
        and done.returncode == 1
        and package.is_file()
        and not uploads_of(server.db, sha256_of(package))
    )
    again = push(server, package, key)
    ok = refused and again.returncode == 0 and "accepted" in again.stdout
    return ok, f"{line[:300]} | then: {again.stdout.strip()[:120]} {again.stderr.strip()[-300:]}"


def database_unreachable(
    server: Server, package: Path, key: str, cut: Callable[[], None], mend: Callable[[], None]
) -> tuple[bool, str]:
    """The database cut: 503 to the push (after its retries), which keeps its package."""
    return refused_then_stored(server, package, key, (cut, mend), "503: database unavailable", 1)


def disk_full_on_tmpfs(folder: Path, db: str, package: Path) -> tuple[bool, str]:
    """A server whose --root is a tmpfs (needs root), filled: 507, nothing stored, the
    package kept; freed, it is stored."""
    with full_tmpfs(folder, size="8m", fill=False) as root:
        server = Server(db, root).start()
        try:
            fault = (lambda: fill_up(root), lambda: (root / "filler").unlink())
            return refused_then_stored(
                server, package, server.key("lab-f"), fault, "(507): the server's disk is full", 0
            )
        finally:
            server.stop()
