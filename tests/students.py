"""Real student cgroups (v1) for the tests that run instances inside them: the check that
this machine allows them (``needs_v1``, ``_v1_ready``) and the profile that puts each instance
in its group. The groups themselves are the ``students`` fixture of tests/conftest.py."""

from __future__ import annotations

import os
import shutil

import pytest

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


ISO_JOB = {
    "partition_scheme": {"type": "per-gpu", "cgroup": "cpuset,memory:student{CUDA_VISIBLE_DEVICES}"}
}
