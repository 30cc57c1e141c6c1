"""A real results server for the server tests and benchmarks/server_load.py: `milarun serve`
started on a free loopback port, its admin key read from what it prints, keys made with the
real `milarun serve keys add`, run folders made by bidkit (no suite run)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

import bidkit
from conftest import ROOT, cli_env

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

    def start(self, timeout: float = 60) -> Server:
        """Start it (again: the same database, root and port) and wait until it answers."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "milarun", "serve", "--port", str(self.port), "--db", self.db,
             "--root", str(self.root), *self.extra],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(),
            start_new_session=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        lines = []
        while True:  # what it prints before uvicorn starts: its admin key, then its URL
            line = self.process.stdout.readline()
            assert line, f"milarun serve ended: {''.join(lines)}"
            lines.append(line)
            if line.startswith("mrk_"):
                self.admin = line.strip()
            if line.startswith("milarun results server on"):
                break
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"milarun serve did not answer in {timeout} s")

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
            [sys.executable, "-m", "milarun", "serve", "keys", "add", "--site", site,
             "--db", self.db, *options],
            cwd=ROOT, capture_output=True, text=True, env=cli_env(), timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]


def push(server: Server, source: Path, key: str, *options: str, cache: Path | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess:  # fmt: skip
    """`milarun push SOURCE --server URL` with the key in $MILARUN_KEY."""
    env = {"MILARUN_KEY": key}
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "milarun", "push", str(source), "--server", server.url, *options],
        cwd=ROOT, capture_output=True, text=True, env=cli_env(env), timeout=timeout,
    )  # fmt: skip


def run_folder(folder: Path, seed: int = 0, rates: dict[str, float] | None = None) -> Path:
    """A `milarun jobs quick` folder of known rates (bidkit: the harness's own records)."""
    return bidkit.synthetic_run(folder, rates or RATES, devices=2, repeat=1, seed=seed)


def package(folder: Path, out: Path, tender: Path | None = None) -> Path:
    from milarun.tender.package import make_package

    make_package(folder, out, tender)
    return out
