"""The warm process: imports torch and milarun once, then forks each benchmark instance.

``python -m milarun.cli.warmstart REQUESTS REPLIES [LOGS]`` reads one JSON request a line
on the fd REQUESTS and answers on the fd REPLIES (``milarun.run.warm`` is the other end;
LOGS, the run's logs folder, only names the run in the command line its forks share):

- ``{"op": "fork", "module", "argv", "env", "cwd", "log", "log_limit", "procs"}``: import
  the test's module here (once), then fork. The child becomes what ``python -m milarun
  run ...`` would be: its own session, its student cgroups joined first, the request's
  environment, its log on stdout and stderr, torch's thread count for its CPUs, then the
  ``milarun`` command line with ``argv``. Answer ``forked`` (pid), ``failed`` (the child
  could not be set up: it was not started) or ``refused`` (start it cold, with the reason).
- ``{"exit": pid, "status": wait status}`` is sent for each child that ends.

The process never runs a test, a parallel torch op or a CUDA call itself: a child inherits
what it holds, so the only state it passes on is what importing the modules made. A module
whose import changes torch's global state or starts a thread would pass that on to the
tests of other modules: its own instance is forked (a cold start would import it too), then
this process retires (``retire`` in the answer) and the supervisor starts a fresh one.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import select
import signal
import sys
import threading
import traceback
from typing import Any

from milarun.machine import isolation

# The modules every instance needs: the command line (it parses `milarun run`), the runner
# and, through them, torch. Importing the CLI first keeps its registry scan short (cli.main).
BASE_MODULES = ("milarun.cli.main", "milarun.measure.runner", "torch")
READY_TIMEOUT = 30.0  # the child's set-up (cgroups, log) is milliseconds; a hung one fails


def _send(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def threads_at_fork() -> int:
    """The threads of this process that a fork finds running: a throwaway fork first lets
    the pools that stop for a fork (OpenBLAS's, started by numpy's import) stop, so only
    the threads that would hold their locks across a fork are counted."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return len(os.listdir("/proc/self/task"))


def fingerprint() -> dict[str, Any]:
    """What a child inherits from this process besides its modules: torch's global settings,
    its RNG, CUDA (never started here), and the threads running."""
    state: dict[str, Any] = {"threads": threads_at_fork()}
    torch = sys.modules.get("torch")
    if torch is None:
        return state
    cuda = torch.cuda
    state.update(
        dtype=str(torch.get_default_dtype()),
        grad=torch.is_grad_enabled(),
        deterministic=torch.are_deterministic_algorithms_enabled(),
        matmul=torch.get_float32_matmul_precision(),
        cudnn=(torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic),
        tf32=(torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32),
        seed=torch.initial_seed(),
        rng=hash(torch.random.get_rng_state().numpy().tobytes()),
        cuda=cuda.is_initialized() or getattr(cuda, "_cached_device_count", None) is not None,
    )
    return state


def _unsafe(state: dict[str, Any]) -> str | None:
    """Why no child may be forked from a process in this state, or None."""
    if state.get("cuda"):
        return "CUDA was started by an import (a forked child could not use it)"
    if state["threads"] > 1 or threading.active_count() > 1:
        return f"an import started threads ({state['threads']} running; fork copies one)"
    return None


def _changed(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    keys = [k for k in after if before.get(k) != after[k]]
    return ", ".join(f"{k} {before.get(k)!r} -> {after[k]!r}" for k in keys) or None


def _set_up_child(request: dict[str, Any], closing: list[int]) -> None:
    """Make this forked child what a cold ``milarun run`` would be, up to its first line."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for fd in closing:
        os.close(fd)
    limit = int(request["log_limit"])
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    isolation.join_groups(request.get("procs") or [])  # as cgexec, before anything else
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    torch = sys.modules.get("torch")
    if torch is not None:
        # OpenMP read its thread count when torch loaded here: the supervisor starts a warm
        # process with the count a cold start would read (its variable, else its group's
        # CPUs). Set only where they differ: setting it, even to the same count, slowed
        # LSTM steps by 10-15% (benchmarks/README.md).
        wanted = os.environ.get("OMP_NUM_THREADS", "")
        count = (
            int(wanted) if wanted.isdigit() and int(wanted) > 0 else len(os.sched_getaffinity(0))
        )
        if torch.get_num_threads() != count:
            torch.set_num_threads(count)
        torch.seed()  # a fresh process seeds its default generator at random: so does a fork
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # random reseeds itself after fork; numpy's global generator not
        numpy.random.seed()


def _child(request: dict[str, Any], ready: int, closing: list[int]) -> int:
    try:
        _set_up_child(request, closing)
    except BaseException as err:
        os.write(ready, f"{type(err).__name__}: {err}".encode()[:2000])
        return 1
    os.write(ready, b"ok")
    os.close(ready)
    from milarun.cli.main import main

    try:
        main(list(request["argv"]))
        code: Any = 0
    except SystemExit as done:
        code = done.code
    except BaseException:
        traceback.print_exc()
        code = 1
    if not isinstance(code, int):
        code = 0 if code is None else 1
    return code


class WarmProcess:
    def __init__(self, requests: int, replies: int):
        self.requests, self.replies = requests, replies
        self.baseline = fingerprint()
        self.buffer = b""
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd fires

    def serve(self) -> None:
        while True:
            ready, _, _ = select.select([self.requests, self.wake_r], [], [])
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
                self.reap()
            if self.requests in ready:
                chunk = os.read(self.requests, 65536)
                if not chunk:  # the supervisor is done with us (or gone)
                    return
                self.buffer += chunk
                while b"\n" in self.buffer:
                    line, self.buffer = self.buffer.split(b"\n", 1)
                    if not self.handle(json.loads(line)):
                        return

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            _send(self.replies, {"exit": pid, "status": status})

    def handle(self, request: dict[str, Any]) -> bool:
        """Answer one fork request; False when this process retires after it."""
        module = request["module"]
        try:
            importlib.import_module(module)
        except BaseException as err:  # the cold start will meet the same error, and say it
            _send(self.replies, {"op": "refused", "reason": f"import {module}: {err}"[:500]})
            return True
        state = fingerprint()
        unsafe = _unsafe(state)
        if unsafe:
            _send(self.replies, {"op": "refused", "reason": f"{module}: {unsafe}", "retire": 1})
            return False
        changed = _changed(self.baseline, state)
        answer = self.fork(request)
        if changed:
            answer["retire"] = f"importing {module} changed {changed}"
        _send(self.replies, answer)
        return not changed

    def fork(self, request: dict[str, Any]) -> dict[str, Any]:
        ready_r, ready_w = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # nothing of ours may be written again by the child
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(ready_r)
                closing = [self.requests, self.replies, self.wake_r, self.wake_w]
                code = _child(request, ready_w, closing)
            finally:
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:
                        pass
                os._exit(code)
        os.close(ready_w)
        said = b""
        try:
            while True:
                ready, _, _ = select.select([ready_r], [], [], READY_TIMEOUT)
                chunk = os.read(ready_r, 4096) if ready else b""
                if not chunk:
                    break
                said += chunk
        finally:
            os.close(ready_r)
        if said == b"ok":
            return {"op": "forked", "pid": pid}
        if not said:
            os.kill(pid, signal.SIGKILL)
            said = b"no answer from the forked child"
        return {"op": "failed", "pid": pid, "reason": said.decode("utf-8", "replace")}


def main(argv: list[str]) -> int:
    requests, replies = int(argv[0]), int(argv[1])
    # torch.cuda.is_available() in an import asks NVML, which starts no CUDA context here
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    for name in BASE_MODULES:
        importlib.import_module(name)
    warm = WarmProcess(requests, replies)
    unsafe = _unsafe(warm.baseline)
    _send(replies, {"op": "ready", "unsafe": unsafe})
    if unsafe is None:
        warm.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
