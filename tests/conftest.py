from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import clifork

TESTS = Path(__file__).resolve().parent  # tests/: the helpers; tests/<wing>/: the tests
ROOT = TESTS.parent  # the repository
BENCHES = TESTS / "benches"  # toy tests (faulty, rankenv) the CLI tests run
DATA = TESTS / "data"  # fixtures: a real H100's NVML readings, the pinned golden report


@atexit.register  # registered first, so it runs last: after pytest has printed everything
def _quiet_interpreter_exit() -> None:
    """triton's nanobind bindings (imported by every `import torch`) list ~60 'leaked'
    objects on stderr as a pytest process's interpreter shuts down: noise, not ours."""
    sys.stderr.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)


def cli_env(
    env: Mapping[str, str] | None = None,
    *,
    benches: bool = True,
    keep_omp: bool = False,
    keep_pythonpath: bool = False,
) -> dict[str, str]:
    """The environment of a ``milarun`` (or any repository Python) subprocess of a test.

    This process's environment, with PYTHONPATH naming tests/benches (the toy tests faulty
    and rankenv; ``benches=False``: not) and the repository, and without OMP_NUM_THREADS, so
    that milarun gives each instance its share of the CPUs as it would from a fresh shell;
    then ``env`` on top (a caller that wants OMP_NUM_THREADS sets it there).
    ``keep_omp``: keep this process's OMP_NUM_THREADS; ``keep_pythonpath``: keep this
    process's PYTHONPATH, after ours.
    """
    path = [str(BENCHES)] if benches else []
    path.append(str(ROOT))
    if keep_pythonpath and os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    if not keep_omp:
        full_env.pop("OMP_NUM_THREADS", None)
    return {**full_env, **(env or {})}


def milarun(
    *args: str, cwd: Path | None = None, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the real ``milarun`` CLI in a process of its own: forked warm (tests/clifork.py:
    the CLI and its libraries imported once), or cold where no warm server is available or
    MILARUN_TESTS_COLD=1."""
    words, full_env = [str(a) for a in args], cli_env(env)
    warm = clifork.run(words, cwd or ROOT, full_env, timeout)
    if warm is not None:
        return warm
    return subprocess.run(
        [sys.executable, "-m", "milarun", *words],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def milarun_process(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The real ``milarun`` CLI started in a subprocess, its output piped (text)."""
    return subprocess.Popen(
        [sys.executable, "-m", "milarun", *map(str, args)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(env),
    )


# per-device tests of quick.json run by quick_run (sine_wave has its own tests: suite time)
QUICK_TESTS = ("calibration", "polynome")
QUICK_RUN_SLICES = 6  # a steady window of 4 slices: enough for every check on it


def one_line_error(done: subprocess.CompletedProcess) -> str:
    """The one line a bad input gets on stderr (no traceback, a non-zero exit)."""
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def load_all(folder: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


@pytest.fixture(scope="session", autouse=True)
def _own_results_database(tmp_path_factory):
    """Every test's default results database is its session's own, never the user's
    (`doctor --active` keeps its fingerprint references there); a test that wants one names
    it with --db or MILARUN_DB."""
    if "MILARUN_DB" not in os.environ:
        os.environ["MILARUN_DB"] = str(tmp_path_factory.mktemp("db") / "history.sqlite")


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory):
    """One real ``milarun jobs quick --devices cpu:2`` shared by several tests: the harness,
    a toy and the scaling jobs (each model has its own test; the whole suite takes minutes)."""
    out = tmp_path_factory.mktemp("quick")
    done = milarun(
        "jobs",
        "quick",
        "--name",
        *QUICK_TESTS,
        "scaling",
        "--devices",
        "cpu:2",
        "-o",
        out,
        "-d",
        tmp_path_factory.mktemp("data"),
        "--",
        "--min-slices",
        str(QUICK_RUN_SLICES),
    )
    return done, out


@pytest.fixture
def cpu_hogs_alone():
    """Held by a test that pins CPU hogs to cores or compares cores' speeds: one such test
    at a time over the xdist workers, whatever their groups (a hog of another worker's test
    on a core was measured as this one's: the doctor's sibling check and the history's
    regression both failed so in CI, each beside the other's hogs). A fixture of a wider
    scope is set up before it: such a fixture takes ``cpu_hogs_lock`` itself."""
    with cpu_hogs_lock():
        yield


@contextlib.contextmanager
def cpu_hogs_lock() -> Iterator[None]:
    """The lock behind ``cpu_hogs_alone``, for a module's or session's fixture."""
    with open(Path(tempfile.gettempdir()) / "milarun-tests-cpu-hogs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture
def students(monkeypatch):
    """Two real student groups (cgroup v1) under a test-only parent, removed afterwards: the
    parent's name and the hierarchies. For the tests of three wings (machine, run, doctor),
    each guarded by ``students.needs_v1`` or ``students._v1_ready``."""
    from milarun.machine import isolation

    parent = f"milarun-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(isolation.PARENT_ENV, parent)
    done = milarun("cgroups", "setup", "--devices", "cpu:2", env={isolation.PARENT_ENV: parent})
    assert done.returncode == 0, done.stderr
    hier = isolation.find_hierarchies()
    yield parent, hier
    done = milarun("cgroups", "teardown", "--devices", "cpu:2", env={isolation.PARENT_ENV: parent})
    assert done.returncode == 0, done.stderr
    for h in hier.values():
        assert not h.dir(h.path(parent)).exists()


# -- markers (registered in pyproject.toml) --------------------------------------------------
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """Before the other hooks (-m selection, xdist's groups): a test of the shared quick run
    is slow and in the quick_run group, so that the run happens once (on the one worker
    that runs them all), whoever adds such a test. After them: the xdist groups applied."""
    for item in items:
        if "quick_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group(name="quick_run"))
    result = yield
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        _group_node_ids(items)
        # The long work first (the groups, the slow tests), the short tests behind it to
        # fill the workers in: a long group scheduled last was the whole suite's tail.
        items.sort(
            key=lambda item: (
                not (item.get_closest_marker("xdist_group") or item.get_closest_marker("slow"))
            )
        )
    return result


def _group_node_ids(items: list[pytest.Item]) -> None:
    """Give each test of an xdist_group the ``@group`` suffix that --dist loadgroup schedules
    by, where xdist could not: xdist 3.8 sets the old ``_nodeid``, which pytest 9.2 no longer
    reads (pytest-xdist issue 1386), and the groups were silently ignored. A no-op once
    xdist sets it; an error if neither way works, rather than groups silently spread."""
    for item in items:
        names = sorted(
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        )
        if "quick_run" in names:  # the shared run's group alone: a second group made a second run
            names = ["quick_run"]
        suffix = "@" + "_".join(dict.fromkeys(names))
        if not names or item.nodeid.endswith(suffix):
            continue
        wanted = item.nodeid + suffix
        if hasattr(item, "_id"):  # pytest >= 9.2: a structured NodeId
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(wanted)
        else:
            item._nodeid = wanted
        if item.nodeid != wanted:
            raise pytest.UsageError(f"cannot put {item.nodeid} in its xdist_group{suffix}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``root`` tests are skipped unless this process runs as root, ``gpu`` tests where
    torch sees no CUDA GPU; each with its reason (the marker's argument: what needs it)."""
    root = item.get_closest_marker("root")
    if root is not None and os.geteuid() != 0:
        pytest.skip(f"needs root ({root.args[0]})" if root.args else "needs root")
    gpu = item.get_closest_marker("gpu")
    if gpu is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU (torch sees none)")
