"""Student cgroups: planning, a fake v2 tree, and real v1 groups on this machine."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import load_all, milarun, one_line_error
from milarun import errors
from milarun.machine import cgroupfs, isolation
from milarun.machine.isolation import Hierarchy
from milarun.measure import confinement
from students import ISO_JOB, needs_v1


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
    """root -> system.slice -> job (our group); cpuset and memory handed down to job."""
    root = tmp_path / "cgroup"
    own = root / "system.slice" / "job"
    own.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text("cpuset cpu memory pids\n")
    (root / "system.slice" / "cgroup.controllers").write_text("cpuset cpu memory pids\n")
    (root / "system.slice" / "cgroup.subtree_control").write_text("cpuset memory\n")
    (own / "cgroup.controllers").write_text("cpuset memory\n")
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


class FakeKernel:
    """Writes to a fake v2 tree's control files as the kernel takes them. subtree_control:
    "+c" needs c in the group's cgroup.controllers (ENOENT), and no process in a non-root
    group (EBUSY); the children then list c in theirs. cgroup.procs: the pid leaves its
    old group."""

    def __init__(self, root: Path):
        self.root = root

    def open(self, path, mode="r", *args, **kwargs):
        path = Path(path)
        if "w" in mode and path.name in ("cgroup.subtree_control", "cgroup.procs"):
            return _Writer(lambda text: self.write(path, text))
        return open(path, mode, *args, **kwargs)

    @staticmethod
    def words(path: Path) -> list[str]:
        return path.read_text().split() if path.exists() else []

    def write(self, path: Path, text: str) -> None:
        group = path.parent
        if path.name == "cgroup.procs":
            for other in self.root.rglob("cgroup.procs"):
                other.write_text("\n".join(w for w in self.words(other) if w != text.strip()))
            path.write_text("\n".join([*self.words(path), text.strip()]))
            return
        listed = group / "cgroup.controllers"  # a new folder: what its parent hands down
        available = self.words(listed if listed.exists() else group.parent / path.name)
        enabled = set(self.words(path))
        for word in text.split():
            if word[0] == "+" and word[1:] not in available:
                raise OSError(errno.ENOENT, "No such file or directory")
            if group != self.root and self.words(group / "cgroup.procs"):
                raise OSError(errno.EBUSY, "Device or resource busy")
            (enabled.add if word[0] == "+" else enabled.discard)(word[1:])
        path.write_text(" ".join(sorted(enabled)))
        for child in (c for c in group.iterdir() if c.is_dir()):
            (child / "cgroup.controllers").write_text(" ".join(sorted(enabled)))


class _Writer:
    def __init__(self, write):
        self.write_text = write

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, text: str) -> int:
        self.write_text(text)
        return len(text)


@pytest.fixture
def kernel(fake_v2, monkeypatch):
    fake = FakeKernel(fake_v2[1])
    monkeypatch.setattr(cgroupfs, "open", fake.open, raising=False)
    return fake


def test_v2_hierarchy_is_found(fake_v2):
    hier, root, _ = fake_v2
    assert set(hier) == {"cpuset", "memory"}
    assert hier["cpuset"] == Hierarchy("cpuset", 2, root, "/system.slice/job")


def test_v2_setup_writes_the_files_and_teardown_removes_them(fake_v2, kernel, monkeypatch):
    hier, root, own = fake_v2
    monkeypatch.setenv(isolation.PARENT_ENV, "bench")
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


def test_v2_setup_moves_our_processes_into_a_leaf_first(fake_v2, kernel, tmp_path):
    # Seen on an H200 machine: our group held the command's processes, so enabling a
    # controller for its children was refused (EBUSY). setup moves them into milarun.leaf,
    # and a process in the leaf still puts students beside it.
    hier, root, own = fake_v2
    (own / "cgroup.procs").write_text("4242\n4243\n")
    students = isolation.plan_students(["0"], [0, 1, 2, 3], "0", 8 * 2**30)
    done = isolation.setup(students, hier)
    assert [d for d in done if "moved" in d] == [
        "/system.slice/job/milarun.leaf (2 process(es) of /system.slice/job moved there: "
        "a v2 group with processes cannot have student groups)"
    ]
    assert (own / isolation.V2_LEAF / "cgroup.procs").read_text().split() == ["4242", "4243"]
    assert (own / "cgroup.procs").read_text().split() == []
    assert (own / "student0" / "cpuset.cpus").read_text() == "0-3"
    proc = tmp_path / "cgroup-leaf"
    proc.write_text("0::/system.slice/job/milarun.leaf\n")
    again = isolation.find_hierarchies(str(tmp_path / "mountinfo"), str(proc))
    assert again["cpuset"].own == "/system.slice/job"
    assert isolation.student_path(again["cpuset"], "student0") == "/system.slice/job/student0"


def test_v2_setup_hands_the_controller_down_to_our_group(fake_v2, kernel):
    # Seen on the same machine next: ENOENT, as our parent did not enable cpuset for its
    # children. setup enables it from the nearest ancestor that has it, top down.
    hier, root, own = fake_v2
    (root / "system.slice" / "cgroup.subtree_control").write_text("memory\n")
    (own / "cgroup.controllers").write_text("memory\n")
    students = isolation.plan_students(["0"], [0, 1, 2, 3], "0", 8 * 2**30)
    done = isolation.setup(students, hier)
    assert "cpuset for the children of /system.slice (so that /system.slice/job has it)" in done
    assert (own / "cgroup.controllers").read_text().split() == ["cpuset", "memory"]
    assert (own / "student0" / "cpuset.cpus").read_text() == "0-3"


def test_v2_controller_refused_is_one_line(fake_v2, kernel):
    # An ancestor that holds processes cannot hand the controller down: say so, in one line.
    hier, root, own = fake_v2
    (root / "system.slice" / "cgroup.subtree_control").write_text("memory\n")
    (own / "cgroup.controllers").write_text("memory\n")
    (root / "system.slice" / "cgroup.procs").write_text("1\n")
    students = isolation.plan_students(["0"], [0, 1, 2, 3], "0", 8 * 2**30)
    with pytest.raises(errors.IsolationError) as err:
        isolation.setup(students, hier)
    assert "\n" not in str(err.value)
    assert "cannot enable cpuset for the children of /system.slice" in str(err.value)
    assert "holds processes of its own" in str(err.value)


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
@pytest.mark.root("creates cgroups")
@needs_v1
def test_instances_run_inside_their_slices(students, tmp_path):
    parent, hier = students
    prof = tmp_path / "iso.json"
    prof.write_text(
        json.dumps(
            {
                "poly": {  # a test that loads torch: its threads follow the slice
                    **ISO_JOB,
                    "experiment": "milabench.models.polynome:main",
                    "arguments": {"--min-slices": 4, "--batch-size": 64},
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


def _iso_profile(path: Path, experiment: str) -> Path:
    path.write_text(json.dumps({"esc": {**ISO_JOB, "experiment": experiment}}))
    return path


@pytest.mark.root("creates cgroups")
@needs_v1
def test_what_an_instance_leaves_in_its_student_group_is_killed(students, tmp_path):
    # A setsid() child leaves the instance's process group but not its cgroup: killed
    # there when the instance ends, so `cgroups teardown` (the fixture) is not "busy".
    parent, hier = students
    prof = _iso_profile(tmp_path / "esc.json", "faulty:escapes")
    done = milarun("jobs", prof, "--devices", "cpu:2", "-o", tmp_path / "out",
                   "--", "--min-slices", "4", env={isolation.PARENT_ENV: parent})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    pids = [int(p.read_text()) for p in (tmp_path / "out").glob("escapee.*")]
    assert len(pids) == 2 and not any(os.path.exists(f"/proc/{pid}") for pid in pids)
    assert "left in its student group" in done.stdout + done.stderr
    for i in (0, 1):
        group = hier["cpuset"].path(f"{parent}/student{i}")
        assert isolation.group_pids({"cpuset": group}, hier) == []


@pytest.mark.root("creates cgroups")
@needs_v1
def test_a_student_group_holding_foreign_processes_is_refused(students, tmp_path):
    parent, hier = students
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        group = hier["cpuset"].dir(hier["cpuset"].path(f"{parent}/student0"))
        (group / "cgroup.procs").write_text(str(sleeper.pid))
        prof = _iso_profile(tmp_path / "esc.json", "faulty:steps")
        done = milarun("jobs", prof, "--devices", "cpu:2", "-o", tmp_path / "out",
                       env={isolation.PARENT_ENV: parent})  # fmt: skip
        line = one_line_error(done)
        assert f"already holds 1 process(es) (pid {sleeper.pid})" in line
        assert sleeper.poll() is None  # not ours: never killed
    finally:
        sleeper.kill()
        sleeper.wait()


# -- the page cache (nocache) ------------------------------------------------------------------
def test_nocache_is_read_from_the_process_maps():
    lib = "7f3a1c000000-7f3a1c001000 r-xp 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/nocache/"
    libc = "7f3a1b000000-7f3a1b100000 r-xp 00000000 08:01 7 /usr/lib/x86_64-linux-gnu/libc.so.6"
    assert confinement.nocache_loaded(f"{libc}\n{lib}nocache.so\n")
    assert not confinement.nocache_loaded(f"{libc}\n7f3a1a000000-7f3a1a021000 rw-p 0 0 0 [heap]\n")
    assert not confinement.nocache_loaded()  # this process: nothing preloaded
    assert confinement.isolation_record().nocache is False


@pytest.mark.skipif(shutil.which("cc") is None, reason="builds a stand-in nocache library")
def test_each_result_says_whether_its_reads_bypassed_the_page_cache(tmp_path):
    """The legacy profiles ran each test under `nocache` (exec_prefix); `jobs` runs without
    it where it is not installed, and each result records which it was."""
    import subprocess

    source = tmp_path / "empty.c"
    source.write_text("int milarun_stand_in;\n")
    lib = tmp_path / "nocache.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, source], check=True)
    wrapper = tmp_path / "nocache"
    wrapper.write_text(f'#!/bin/sh\nLD_PRELOAD="{lib}" exec "$@"\n')
    wrapper.chmod(0o755)
    steps = {"experiment": "faulty:steps", "arguments": {"--min-slices": 4}}
    prof = tmp_path / "p.json"
    prof.write_text(
        json.dumps(
            {
                "with": {**steps, "exec_prefix": [str(wrapper)]},
                "without": {**steps, "exec_prefix": [f"nocache-{uuid.uuid4().hex}"]},
            }
        )
    )
    done = milarun("jobs", prof, "--devices", "cpu:1", "-o", tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    found = {r["name"].rsplit(".", 1)[1]: r for r in load_all(tmp_path / "out").values()}
    assert found["with"]["isolation"]["nocache"] is True
    assert found["without"]["isolation"]["nocache"] is False
