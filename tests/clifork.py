"""`milarun` commands of the tests started warm: forked from a process that imported the CLI
and the libraries its commands load (pandas, scipy, matplotlib, jinja2, SQLAlchemy, ...).

A command's process is still its own: a fork of a pristine server that never ran a command,
with the command's environment, working folder, ``sys.path`` (``PYTHONPATH``) and ``argv``
set before ``python -m milarun`` runs in it, its stdout and stderr the caller's files, its
exit code and signal as a cold process's (threads joined and ``atexit`` run, as the
interpreter's exit does). What it saves is the start: 0.4-1.2 s of CPU a command of importing
what the server already holds (the suite starts several hundred). torch is not preloaded: a
`run` imports it itself, with its own thread settings (the run wing's warm start, as tested
in tests/run, is what forks instances with torch). ``MILARUN_TESTS_COLD=1`` starts every
command cold, as before.

The server: ``python tests/clifork.py SOCKET``, one per test process (started on first use);
per request (a SOCK_SEQPACKET message and two file descriptors) it forks an attendant that
forks the command, sends its pid, waits for it and sends its exit code.
"""

from __future__ import annotations

import atexit
import importlib
import json
import locale
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# What the commands import lazily, imported once here (an ImportError: left to the command).
PRELOAD = (
    "milarun.cli.main",
    "numpy",
    "pandas",
    "scipy.stats",
    "matplotlib",
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
    "jinja2",
    "orjson",
    "rich",
    "sqlalchemy",
    "alembic",
    "alembic.config",
    "httpx",
    "milarun.report",
    "milarun.history",
    "milarun.tender",
)
MESSAGE = 1 << 20  # a request: argv, environment, folder


# -- the server (its own process) --------------------------------------------------------
def serve(path: str) -> None:
    parent = os.getppid()
    script_dir = sys.path[0]
    inherited = set(filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    base = [p for p in sys.path[1:] if p not in inherited and p != script_dir]
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the attendants are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(1.0)
    print("ready", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test process is gone: so is this server
                os._exit(0)
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _attend(conn, base)
        conn.close()


def _attend(conn: socket.socket, base: list[str]) -> None:
    """The attendant: fork the command, say its pid, wait, say its exit code."""
    code = 1
    try:
        data, fds, _, _ = socket.recv_fds(conn, MESSAGE, 2)
        request = json.loads(data)
        child = os.fork()
        if child == 0:
            conn.close()
            _command(request, fds, base)
        for fd in fds:
            os.close(fd)
        conn.send(json.dumps({"pid": child}).encode())
        _, status = os.waitpid(child, 0)
        conn.send(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode())
        code = 0
    except OSError:
        pass  # the caller gave up (its timeout): the command was killed by it
    os._exit(code)


def _command(request: dict, fds: list[int], base: list[str]) -> None:
    """Become ``python -m milarun ARGV`` in the request's folder and environment."""
    import runpy
    import traceback

    code: int = 1
    try:
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [request["cwd"], *extra, *base]
        sys.argv = ["milarun", *request["argv"]]
        runpy.run_module("milarun", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
    except BaseException:  # as the interpreter would: the traceback, exit 1
        traceback.print_exc()
    try:  # the interpreter's exit: non-daemon threads joined, atexit, streams flushed
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        traceback.print_exc()
        code = code or 120
    os._exit(code)


# -- the tests' side ---------------------------------------------------------------------
_server: tuple[int, str, subprocess.Popen] | None = None


def _server_path() -> str | None:
    """This test process's server (started on first use); None where it cannot start."""
    global _server
    if _server is not None and _server[0] == os.getpid():
        return _server[1] if _server[2].poll() is None else None
    folder = tempfile.mkdtemp(prefix="milarun-clifork-")
    path = os.path.join(folder, "socket")
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("OMP_NUM_THREADS", None)
    server = subprocess.Popen(
        [sys.executable, __file__, path],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    if server.stdout.readline().strip() != "ready":
        server.kill()
        return None
    _server = (os.getpid(), path, server)
    atexit.register(_stop, server)
    return path


def _stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()


def _text(data: bytes) -> str:
    """As ``subprocess.run(text=True)`` decodes: the locale's encoding, universal newlines."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess | None:
    """``python -m milarun ARGV`` forked warm, as ``subprocess.run(..., capture_output=True,
    text=True, timeout=...)`` would run it cold; None where no server is available."""
    if os.environ.get("MILARUN_TESTS_COLD") == "1":
        return None
    path = _server_path()
    if path is None:
        return None
    shown = [sys.executable, "-m", "milarun", *argv]
    request = json.dumps({"argv": argv, "cwd": str(cwd), "env": env}).encode()
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn,
    ):
        conn.connect(path)
        socket.send_fds(conn, [request], [out.fileno(), err.fileno()])
        conn.settimeout(timeout)
        pid = json.loads(conn.recv(MESSAGE))["pid"]
        try:
            code = json.loads(conn.recv(MESSAGE))["code"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            conn.settimeout(30)
            conn.recv(MESSAGE)
            out.seek(0)
            err.seek(0)
            raise subprocess.TimeoutExpired(shown, timeout, out.read(), err.read()) from None
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(shown, code, _text(out.read()), _text(err.read()))


if __name__ == "__main__":
    serve(sys.argv[1])
