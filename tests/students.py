"""Real student cgroups (v1) for the tests that run instances inside them: the check that
this machine allows them, and two groups under a test-only parent, removed afterwards."""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from conftest import milarun
from milarun.machine import isolation


def _v1_ready() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    if not shutil.which("cgcreate"):
        return "cgroup-tools (cgcreate/cgexec) not installed"
    hier = isolation.find_hierarchies()
    if any(h.version != 1 for h in hier.values()) or set(hier) != {"cpuset", "memory"}:
        return "needs cgroup v1 cpuset and memory hierarchies"
    if len(os.sched_getaffinity(0)) < 2:
        return "needs 2 CPUs"
    return None


def needs_v1(test):
    """Real student groups: skipped where this machine cannot make them, and slow (real
    instances in them, seconds each)."""
    why = _v1_ready()
    return pytest.mark.slow(pytest.mark.skipif(why is not None, reason=why or "")(test))


@pytest.fixture(name="students")
def student_groups(monkeypatch):
    """Two real student groups under a test-only parent, removed afterwards."""
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


ISO_JOB = {
    "partition_scheme": {"type": "per-gpu", "cgroup": "cpuset,memory:student{CUDA_VISIBLE_DEVICES}"}
}
