"""Student cgroups: planning, a fake v2 tree, and real v1 groups on this machine."""

from __future__ import annotations

import errno
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from conftest import load_all, milarun
from milarun import errors
from milarun.machine import isolation
from milarun.machine.isolation import Hierarchy
from milarun.measure import confinement


# -- planning -------------------------------------------------------------------------------
def test_cpu_list_round_trip():
    assert isolation.cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert isolation.parse_cpu_list("0-2,5,7-8") == [0, 1, 2, 5, 7, 8]
    assert isolation.cpu_list([3]) == "3"


def test_students_get_equal_disjoint_contiguous_ranges():
    students = isolation.plan_students(["0", "1", "2"], list(range(8)), "0-1", 12 * 2**30)
    assert [s.cpus for s in students] == [(0, 1), (2, 3), (4, 5)]
    assert all(s.memory_limit == 4 * 2**30 and s.mems == "0-1" for s in students)
    assert [s.name for s in students] == ["student0", "student1", "student2"]


def test_gpu_local_cpus_come_first():
    local = {"0": [4, 5, 6, 7], "1": [0, 1, 2, 3]}
    students = isolation.plan_students(["0", "1"], list(range(8)), "0", 2**30, local)
    assert students[0].cpus == (4, 5, 6, 7) and students[1].cpus == (0, 1, 2, 3)


def test_too_many_students_is_an_error():
    with pytest.raises(errors.IsolationError, match="2 CPUs cannot give 3 students"):
        isolation.plan_students(["0", "1", "2"], [0, 1], "0", 2**30)


def test_spec_fills_the_device_id():
    assert isolation.parse_spec("cpuset,memory:student{CUDA_VISIBLE_DEVICES}", "3") == (
        ("cpuset", "memory"),
        "student3",
    )
    with pytest.raises(errors.IsolationError):
        isolation.parse_spec("student0", "0")


# -- a fake cgroup v2 tree ----------------------------------------------------------------------
@pytest.fixture
def fake_v2(tmp_path, monkeypatch):
    root = tmp_path / "cgroup"
    own = root / "system.slice" / "job"
    own.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    (own / "cpuset.cpus").write_text("0-3\n")
    (own / "cpuset.mems").write_text("0\n")
    (own / "memory.max").write_text(f"{8 * 2**30}\n")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 23 0:27 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    proc = tmp_path / "cgroup-self"
    proc.write_text("0::/system.slice/job\n")
    monkeypatch.delenv(isolation.PARENT_ENV, raising=False)
    return isolation.find_hierarchies(str(mountinfo), str(proc)), root, own


def test_v2_hierarchy_is_found(fake_v2):
    hier, root, _ = fake_v2
    assert set(hier) == {"cpuset", "memory"}
    assert hier["cpuset"] == Hierarchy("cpuset", 2, root, "/system.slice/job")


class SubtreeControl:
    """A write to a fake cgroup.subtree_control as the kernel takes it: "+c" enables c,
    "-c" disables it, and the file then lists what is enabled (without the signs)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, text: str) -> int:
        enabled = set(self.path.read_text().split()) if self.path.exists() else set()
        for word in text.split():
            (enabled.add if word[0] == "+" else enabled.discard)(word[1:])
        self.path.write_text(" ".join(sorted(enabled)))
        return len(text)


def test_v2_setup_writes_the_files_and_teardown_removes_them(fake_v2, monkeypatch):
    hier, root, own = fake_v2
    monkeypatch.setenv(isolation.PARENT_ENV, "bench")

    def kernel_open(path, mode="r", *args, **kwargs):
        if Path(path).name == "cgroup.subtree_control" and "w" in mode:
            return SubtreeControl(Path(path))
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(isolation, "open", kernel_open, raising=False)
    students = isolation.plan_students(["0", "1"], [0, 1, 2, 3], "0", 8 * 2**30)
    isolation.setup(students, hier)
    # both controllers enabled for the children, at every level down to the students
    assert (own / "cgroup.subtree_control").read_text().split() == ["cpuset", "memory"]
    assert (own / "bench" / "cgroup.subtree_control").read_text().split() == ["cpuset", "memory"]
    s1 = own / "bench" / "student1"
    assert (s1 / "cpuset.cpus").read_text() == "2-3"
    assert (s1 / "cpuset.mems").read_text() == "0"
    assert (s1 / "memory.max").read_text() == str(4 * 2**30)
    rows = isolation.check(students, hier)
    assert "cpus=2-3" in rows[1]["cpuset"] and f"limit={4 * 2**30}" in rows[1]["memory"]
    place = isolation.placement("cpuset,memory:student{CUDA_VISIBLE_DEVICES}", "1", hier)
    assert place.prefix == [] and place.v2_procs == [s1 / "cgroup.procs"]
    (s1 / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\n")
    assert isolation.oom_kills(place.groups, hier) == 2
    # a real v2 kernel removes interface files with the folder; the fake needs help
    for f in [p for p in (own / "bench").rglob("*") if p.is_file()]:
        f.unlink()
    isolation.teardown(students, hier)
    assert not (own / "bench").exists()


def test_v2_setup_moves_our_processes_into_a_leaf_first(fake_v2, tmp_path, monkeypatch):
    # A v2 group that holds processes cannot give its children controllers (EBUSY): setup
    # moves them into milarun.leaf, and a process there still puts students beside it.
    hier, root, own = fake_v2
    (own / "cgroup.procs").write_text("4242\n4243\n")
    written = []

    def kernel_open(path, mode="r", *args, **kwargs):
        if Path(path).name == "cgroup.subtree_control" and "w" in mode:
            return SubtreeControl(Path(path))
        if Path(path).name == "cgroup.procs" and "w" in mode:
            written.append((Path(path).parent.name, kwargs or args))
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(isolation, "open", kernel_open, raising=False)
    students = isolation.plan_students(["0"], [0, 1, 2, 3], "0", 8 * 2**30)
    done = isolation.setup(students, hier)
    assert [d for d in done if "moved" in d] == [
        "/system.slice/job/milarun.leaf (2 process(es) of /system.slice/job moved there: "
        "a v2 group with processes cannot have student groups)"
    ]
    assert [w[0] for w in written] == ["milarun.leaf", "milarun.leaf"]
    assert (own / "student0" / "cpuset.cpus").read_text() == "0-3"
    proc = tmp_path / "cgroup-leaf"
    proc.write_text("0::/system.slice/job/milarun.leaf\n")
    again = isolation.find_hierarchies(str(tmp_path / "mountinfo"), str(proc))
    assert again["cpuset"].own == "/system.slice/job"
    assert isolation.student_path(again["cpuset"], "student0") == "/system.slice/job/student0"


def test_v2_controller_refused_is_one_line(fake_v2, monkeypatch):
    hier, _, _ = fake_v2

    def busy_open(path, mode="r", *args, **kwargs):
        if Path(path).name == "cgroup.subtree_control" and "w" in mode:
            raise OSError(errno.EBUSY, "Device or resource busy")
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(isolation, "open", busy_open, raising=False)
    students = isolation.plan_students(["0"], [0, 1, 2, 3], "0", 8 * 2**30)
    with pytest.raises(errors.IsolationError, match="cannot enable cpuset.*busy.*own"):
        isolation.setup(students, hier)


def test_v2_missing_group_says_how_to_create_it(fake_v2):
    hier, _, _ = fake_v2
    with pytest.raises(errors.IsolationError, match="cgroups setup.*--no-cgexec"):
        isolation.placement("cpuset,memory:student{CUDA_VISIBLE_DEVICES}", "0", hier)


def test_memory_limit_is_the_smallest_up_the_tree(fake_v2):
    _, root, own = fake_v2
    child = own / "student0"
    child.mkdir()
    (child / "memory.max").write_text("max\n")
    assert confinement.memory_limit({"": "/system.slice/job/student0"}, root) == 8 * 2**30


def test_hybrid_host_uses_the_hierarchy_that_owns_each_controller(tmp_path):
    v2 = tmp_path / "unified"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("memory pids\n")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        f"34 31 0:31 / {tmp_path / 'cpuset'} rw,relatime - cgroup cgroup rw,cpuset\n"
        f"35 31 0:32 / {v2} rw,relatime - cgroup2 cgroup2 rw\n"
    )
    proc = tmp_path / "self"
    proc.write_text("3:cpuset:/slurm/job1\n0::/slurm/job1\n")
    hier = isolation.find_hierarchies(str(mountinfo), str(proc))
    assert hier["cpuset"].version == 1 and hier["cpuset"].own == "/slurm/job1"
    assert hier["memory"].version == 2 and hier["memory"].mount == v2


# -- real cgroup v1 groups on this machine --------------------------------------------------------
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


needs_v1 = pytest.mark.skipif(_v1_ready() is not None, reason=_v1_ready() or "")


@pytest.fixture
def students(monkeypatch):
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


@pytest.mark.root("creates cgroups")
@needs_v1
def test_instances_run_inside_their_slices(students, tmp_path):
    parent, hier = students
    prof = tmp_path / "iso.json"
    prof.write_text(
        json.dumps(
            {
                "cal": {
                    **ISO_JOB,
                    "experiment": "milabench.models.calibration:main",
                    "arguments": {"--min-slices": 4, "--step-time": 0.005},
                }
            }
        )
    )
    done = milarun(
        "jobs",
        prof,
        "--devices",
        "cpu:2",
        "-o",
        tmp_path / "out",
        env={isolation.PARENT_ENV: parent},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = {r["device"]: r for r in load_all(tmp_path / "out").values()}
    for i in (0, 1):
        iso = found[f"cpu:{i}"]["isolation"]
        # the affinity mask is exactly the slice: its own cpuset, disjoint from the other
        cpus = isolation.parse_cpu_list(
            (
                hier["cpuset"].dir(hier["cpuset"].path(f"{parent}/student{i}")) / "cpuset.cpus"
            ).read_text()
        )
        assert iso["cpus"] == sorted(cpus) and iso["cpus"]
        assert iso["cgroups"]["cpuset"] == hier["cpuset"].path(f"{parent}/student{i}")
        assert iso["cgroups"]["memory"] == hier["memory"].path(f"{parent}/student{i}")
        assert iso["memory_limit"] is not None
        assert iso["torch_threads"] == len(iso["cpus"])  # its share of the CPUs
    assert not set(found["cpu:0"]["isolation"]["cpus"]) & set(found["cpu:1"]["isolation"]["cpus"])


@pytest.mark.root("creates cgroups")
@pytest.mark.slow
@needs_v1
def test_memory_hog_is_reported_as_oom_and_its_sibling_finishes(students, tmp_path):
    parent, hier = students
    mem = hier["memory"]
    limit_file = mem.dir(mem.path(f"{parent}/student0")) / "memory.limit_in_bytes"
    limit_file.write_text(str(1024 * 2**20))
    prof = tmp_path / "hog.json"
    prof.write_text(
        json.dumps(
            {"hog": {**ISO_JOB, "experiment": "faulty:hog_on_first_slice", "max_duration": 120}}
        )
    )
    done = milarun(
        "jobs",
        prof,
        "--devices",
        "cpu:2",
        "-o",
        tmp_path / "out",
        env={isolation.PARENT_ENV: parent},
    )
    assert done.returncode == 1
    found = {r["device"]: r for r in load_all(tmp_path / "out").values()}
    assert found["cpu:0"]["failure"]["kind"] == "oom", found["cpu:0"]["failure"]
    assert found["cpu:1"]["success"] is True
