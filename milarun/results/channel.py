"""The result channel of a ``jobs`` run: how an instance hands its finished result to its
supervisor when the results disk cannot take it (full, read-only).

The supervisor listens on a Unix socket in the abstract namespace: it lives in the kernel,
not on any disk, and needs no file. Its address and a secret go to each instance in
RESULT_CHANNEL_ENV (cold, forked from a warm process or started by torchrun alike). An
instance that cannot write its result sends the whole record on it; the supervisor keeps it
in memory, answers ``ok`` and writes it when space returns (run/held.py). The supervisor
takes a record only from a process of its own user that knows the secret, up to
MAX_RESULT_BYTES, and only a readable result.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import struct
import time
from pathlib import Path
from typing import Any

from milarun import errors
from milarun.results.files import as_result

RESULT_CHANNEL_ENV = "MILARUN_RESULT_CHANNEL"
# the prefix of a whole result printed on a console where no disk took it
UNWRITTEN_TAG = "MILARUN_UNWRITTEN_RESULT"
MAX_RESULT_BYTES = 64 * 2**20  # far more than a result (a long run's is ~100 KB)
ACK = b"ok\n"
SEND_TIMEOUT = 60.0  # the supervisor reads its channel every poll (0.1 s), or while it stops
READ_TIMEOUT = 10.0  # a sender that connected sends at once


class ResultChannel:
    """The supervisor's end: a listening socket, read without blocking."""

    def __init__(self) -> None:
        self.secret = secrets.token_hex(16)
        self.address = f"milarun-results-{os.getpid()}-{secrets.token_hex(8)}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.bind("\0" + self.address)
            self.sock.listen(64)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self.refused: list[str] = []  # why a sender was turned away (for the log)

    @property
    def env(self) -> dict[str, str]:
        return {RESULT_CHANNEL_ENV: f"{self.address}:{self.secret}"}

    def receive(self) -> list[tuple[int, dict[str, Any]]]:
        """The results sent since the last call, each with its sender's pid."""
        got: list[tuple[int, dict[str, Any]]] = []
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return got
            with conn:
                try:
                    pid, result = self._read(conn)
                    conn.sendall(ACK)
                    got.append((pid, result))
                except (OSError, ValueError, RecursionError, errors.InputError) as err:
                    self.refused.append(str(err)[:300])

    def _read(self, conn: socket.socket) -> tuple[int, dict[str, Any]]:
        pid, uid, _ = struct.unpack(
            "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        )
        if uid != os.getuid():
            raise ValueError(f"pid {pid} of user {uid} is not this run's")
        conn.setblocking(True)
        conn.settimeout(READ_TIMEOUT)
        data = bytearray()
        while chunk := conn.recv(1 << 20):
            data += chunk
            if len(data) > MAX_RESULT_BYTES + 100:
                raise ValueError(f"pid {pid} sent more than {MAX_RESULT_BYTES} bytes")
        secret, _, body = bytes(data).partition(b"\n")
        if not secrets.compare_digest(secret, self.secret.encode()):
            raise ValueError(f"pid {pid} does not know this run's secret")
        return pid, as_result(json.loads(body), Path(f"(the result pid {pid} sent)"))

    def close(self) -> None:
        self.sock.close()


def send(result: dict[str, Any], environ: dict[str, str] | None = None) -> str | None:
    """Hand ``result`` to the supervisor named in the environment; None once it holds it,
    else why not (no supervisor, it did not answer)."""
    value = (os.environ if environ is None else environ).get(RESULT_CHANNEL_ENV, "")
    address, _, secret = value.rpartition(":")
    if not address or not secret:
        return "no supervisor's channel (not under milarun jobs)"
    body = secret.encode() + b"\n" + json.dumps(result, default=str).encode()
    deadline = time.monotonic() + SEND_TIMEOUT
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(SEND_TIMEOUT)
            sock.connect("\0" + address)
            sock.sendall(body)
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while len(answer) < len(ACK) and time.monotonic() < deadline:
                chunk = sock.recv(len(ACK))
                if not chunk:
                    break
                answer += chunk
    except OSError as err:
        return f"the supervisor's channel failed ({err.strerror or err})"
    return None if answer == ACK else "the supervisor did not take it"
