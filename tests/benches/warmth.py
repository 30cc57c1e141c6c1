"""Tests that read or spoil what an instance inherits, for the warm-start tests: each
records the global state it found in its metrics, then trains a few slices."""

import os
import signal
import sys
import threading
import time

import numpy
import torch

from faulty import _spin_steps


def found() -> dict:
    """What this process found on arrival, as metrics (numbers)."""
    return {
        "dtype_bits": torch.get_default_dtype().itemsize * 8,
        "threads": torch.get_num_threads(),
        "cpus": len(os.sched_getaffinity(0)),
        "grad": int(torch.is_grad_enabled()),
        "deterministic": int(torch.are_deterministic_algorithms_enabled()),
        "torch_seed": torch.initial_seed(),
        "numpy_draw": float(numpy.random.random_sample()),
        "python_threads": threading.active_count(),
        "stdin_is_null": int(os.path.samefile("/dev/null", "/proc/self/fd/0")),
        "leaked_module": int("warmth_leak" in sys.modules),
        "session_leader": int(os.getsid(0) == os.getpid()),
        "gpus_hidden": int(os.environ.get("CUDA_VISIBLE_DEVICES") == ""),
        "forked": int(os.environ.get("MILARUN_START", "").startswith("forked")),
        "fsize_limit": __import__("resource").getrlimit(__import__("resource").RLIMIT_FSIZE)[0],
    }


def state(exp, argv):
    for key, value in found().items():
        exp.metric(key, value)
    _spin_steps(exp, argv)


def leaks(exp, argv):
    """Changes every global it can, leaves a thread running, then trains."""
    state(exp, argv)
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True)
    sys.modules["warmth_leak"] = sys  # type: ignore[assignment]
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()


def kills_its_warm_process(exp, argv):
    """Kills the warm process it was forked from, then trains to the end as if nothing."""
    parent = os.getppid()
    if os.environ.get("MILARUN_START", "").startswith("forked"):
        os.kill(parent, signal.SIGKILL)
        deadline = time.time() + 10
        while os.getppid() == parent and time.time() < deadline:
            time.sleep(0.01)
    state(exp, argv)


def segfaults(exp, argv):
    os.kill(os.getpid(), signal.SIGSEGV)
