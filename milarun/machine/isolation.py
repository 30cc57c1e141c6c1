"""Student isolation with cgroups: set up, check, tear down, launch into, and read back.

One group ``student<id>`` per device, created under this process's own cgroup in each
controller's hierarchy (so it works inside containers and Slurm jobs): equal, disjoint CPU
ranges, every memory node, and RAM/N of memory. cgroup v1 goes through cgroup-tools
(cgcreate/cgset/cgexec/cgdelete); cgroup v2 is written directly. On a hybrid host each
controller uses the hierarchy that owns it.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milarun.errors import IsolationError
from milarun.machine.cgroupfs import (  # noqa: F401  (the cgroup tree, re-exported)
    CGROUP_ROOT,
    V2_LEAF,
    Hierarchy,
    delegate_v2,
    enable_v2,
    find_hierarchies,
    limit_up,
    own_cgroups,
    read_file,
    vacate_v2,
)

CONTROLLERS = ("cpuset", "memory")
PARENT_ENV = "MILARUN_CGROUP_PARENT"  # optional folder between own cgroup and students


# -- plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Student:
    device_id: str
    cpus: tuple[int, ...]
    mems: str
    memory_limit: int

    @property
    def name(self) -> str:
        return f"student{self.device_id}"


def cpu_list(cpus: list[int] | tuple[int, ...]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the cpuset file format)."""
    out: list[str] = []
    start: int | None = None
    prev = 0
    for c in sorted(cpus):
        if start is not None and c != prev + 1:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = None
        if start is None:
            start = c
        prev = c
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(out)


def parse_cpu_list(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus += range(int(lo), int(hi) + 1)
        elif part:
            cpus.append(int(part))
    return cpus


def plan_students(
    device_ids: list[str],
    cpus: list[int],
    mems: str,
    ram: int,
    local_cpus: dict[str, list[int]] | None = None,
) -> list[Student]:
    """Equal, disjoint CPU ranges (a GPU's local CPUs first) and RAM/N each."""
    n = len(device_ids)
    per = len(cpus) // n
    if per < 1:
        raise IsolationError(f"{len(cpus)} CPUs cannot give {n} students one CPU each")
    free = sorted(cpus)
    students = []
    for dev in device_ids:
        local = [c for c in sorted((local_cpus or {}).get(dev, [])) if c in free]
        chosen = local[:per]
        rest = [c for c in free if c not in chosen]
        if len(chosen) < per:
            # Contiguous from the first free CPU, so ranges stay compact.
            chosen += rest[: per - len(chosen)]
        for c in chosen:
            free.remove(c)
        students.append(Student(dev, tuple(sorted(chosen)), mems, ram // n))
    return students


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise IsolationError(f"{' '.join(cmd)} failed: {(done.stderr or done.stdout).strip()}")


def _need_tools() -> None:
    missing = [t for t in ("cgcreate", "cgset", "cgdelete", "cgexec") if not shutil.which(t)]
    if missing:
        raise IsolationError(
            f"{', '.join(missing)} not found: install cgroup-tools (apt-get install cgroup-tools)"
        )


def _create(h: Hierarchy, path: str) -> None:
    """Create ``path`` and any missing parent below our own group, ready for tasks."""
    parts = path[len(h.own) :].strip("/").split("/") if path != h.own else []
    current = h.own
    for part in parts:
        parent, current = current, posixpath.join(current, part)
        if h.version == 2:  # one tree for every controller: each enables itself, folder or not
            enable_v2(h, parent)
        if h.dir(current).is_dir():
            continue
        if h.version == 1:
            _need_tools()
            _run(["cgcreate", "-g", f"{h.controller}:{current}"])
            if h.controller == "cpuset":  # a v1 cpuset is unusable until it has cpus/mems
                cpus = read_file(h.dir(parent) / "cpuset.cpus") or ""
                mems = read_file(h.dir(parent) / "cpuset.mems") or ""
                _run(["cgset", "-r", f"cpuset.cpus={cpus}", "-r", f"cpuset.mems={mems}", current])
        else:
            h.dir(current).mkdir()


def _configure(h: Hierarchy, path: str, student: Student) -> None:
    if h.controller == "cpuset":
        values = {"cpuset.cpus": cpu_list(student.cpus), "cpuset.mems": student.mems}
    elif h.version == 1:
        values = {"memory.limit_in_bytes": str(student.memory_limit)}
    else:
        values = {"memory.max": str(student.memory_limit)}
    if h.version == 1:
        args = [a for k, v in values.items() for a in ("-r", f"{k}={v}")]
        _run(["cgset", *args, path])
    else:
        for key, value in values.items():
            (h.dir(path) / key).write_text(value)


def student_path(h: Hierarchy, name: str, parent: str | None = None) -> str:
    parent = os.environ.get(PARENT_ENV, "") if parent is None else parent
    return h.path(posixpath.join(parent, name) if parent else name)


# -- commands -------------------------------------------------------------------------------
def machine_plan(
    device_ids: list[str],
    hier: dict[str, Hierarchy],
    local_cpus: dict[str, list[int]] | None = None,
) -> list[Student]:
    """Students for these devices from the CPUs, memory nodes and RAM we are allowed."""
    import psutil

    cpus = sorted(os.sched_getaffinity(0))
    mems = "0"
    if "cpuset" in hier:
        h = hier["cpuset"]
        cpus = parse_cpu_list(read_file(h.dir(h.own) / "cpuset.cpus") or "") or cpus
        for name in ("cpuset.mems", "cpuset.mems.effective"):
            mems = read_file(h.dir(h.own) / name) or mems
    ram = psutil.virtual_memory().total
    if "memory" in hier:
        h = hier["memory"]
        key = "memory.limit_in_bytes" if h.version == 1 else "memory.max"
        limit = limit_up(h.mount, h.own, key)
        ram = min(ram, limit) if limit else ram
    return plan_students(device_ids, cpus, mems, ram, local_cpus)


def setup(
    students: list[Student], hier: dict[str, Hierarchy], controllers: tuple[str, ...] = CONTROLLERS
) -> list[str]:
    """Create and configure each student's groups; returns what was done."""
    _require(hier, controllers)
    done = []
    v2_trees = {(h.mount, h.own): h for h in (hier[c] for c in controllers) if h.version == 2}
    for h in v2_trees.values():  # one unified tree: every controller shares one own group
        if moved := vacate_v2(h):
            done.append(
                f"{h.own}/{V2_LEAF} ({moved} process(es) of {h.own} moved there: "
                "a v2 group with processes cannot have student groups)"
            )
    for ctl in controllers:
        if hier[ctl].version == 2:
            for path in delegate_v2(hier[ctl]):
                done.append(f"{ctl} for the children of {path} (so that {hier[ctl].own} has it)")
    for student in students:
        for ctl in controllers:
            h = hier[ctl]
            path = student_path(h, student.name)
            _create(h, path)
            _configure(h, path, student)
            done.append(f"{ctl}:{path}")
    return done


def teardown(
    students: list[Student], hier: dict[str, Hierarchy], controllers: tuple[str, ...] = CONTROLLERS
) -> list[str]:
    """Remove the student groups (and the parent folder when empty)."""
    removed = []
    for ctl in controllers:
        if ctl not in hier:
            continue
        h = hier[ctl]
        paths = [student_path(h, s.name) for s in students]
        parent = os.environ.get(PARENT_ENV, "")
        if parent:
            paths.append(h.path(parent))
        for path in paths:
            directory = h.dir(path)
            if not directory.is_dir():
                continue
            try:
                directory.rmdir()  # works for v1 and v2 once the group has no tasks
            except OSError as err:
                if parent and path == h.path(parent):
                    continue  # other students still live there
                raise IsolationError(
                    f"cannot remove {ctl}:{path}: {err.strerror} "
                    "(is a benchmark still running in it?)"
                ) from err
            removed.append(f"{ctl}:{path}")
    return removed


def check(
    students: list[Student], hier: dict[str, Hierarchy], controllers: tuple[str, ...] = CONTROLLERS
) -> list[dict[str, Any]]:
    """What each student group would give an instance, read back from the files."""
    rows = []
    for student in students:
        row: dict[str, Any] = {
            "student": student.name,
            "planned_cpus": cpu_list(student.cpus),
            "planned_memory": student.memory_limit,
        }
        for ctl in controllers:
            h = hier.get(ctl)
            if h is None:
                row[ctl] = "controller not available"
                continue
            path = student_path(h, student.name)
            d = h.dir(path)
            if not d.is_dir():
                row[ctl] = f"missing ({path})"
            elif ctl == "cpuset":
                row[ctl] = (
                    f"{path} cpus={read_file(d / 'cpuset.cpus')} "
                    f"mems={read_file(d / 'cpuset.mems')}"
                )
            else:
                key = "memory.limit_in_bytes" if h.version == 1 else "memory.max"
                row[ctl] = f"{path} limit={read_file(d / key)}"
        rows.append(row)
    return rows


def _require(hier: dict[str, Hierarchy], controllers: tuple[str, ...]) -> None:
    missing = [c for c in controllers if c not in hier]
    if missing:
        raise IsolationError(
            f"cgroup controller(s) {', '.join(missing)} not available on this machine; "
            "pass --no-cgexec to run without isolation"
        )


# -- launch -------------------------------------------------------------------------------------
@dataclass
class Placement:
    """How to start one instance inside its student groups."""

    prefix: list[str]  # cgexec words for v1 groups
    v2_procs: list[Path]  # cgroup.procs files the child joins itself (v2)
    groups: dict[str, str]  # controller -> path
    spec: str  # human-readable
    procs: list[Path] = field(default_factory=list)  # every group's: what a fork joins


def parse_spec(spec: str, device_id: str) -> tuple[tuple[str, ...], str]:
    """ "cpuset,memory:student{CUDA_VISIBLE_DEVICES}" -> (("cpuset","memory"), "student0")."""
    controllers, sep, name = spec.partition(":")
    if not sep or not name or not controllers:
        raise IsolationError(f"cgroup spec '{spec}' is not CONTROLLERS:NAME")
    name = name.replace("{CUDA_VISIBLE_DEVICES}", device_id)
    return tuple(c for c in controllers.split(",") if c), name


def placement(spec: str, device_id: str, hier: dict[str, Hierarchy]) -> Placement:
    """Where an instance goes; the groups must exist (never a silent unisolated run)."""
    controllers, name = parse_spec(spec, device_id)
    _require(hier, controllers)
    prefix: list[str] = []
    procs: list[Path] = []
    every: list[Path] = []
    groups = {}
    for ctl in controllers:
        h = hier[ctl]
        path = student_path(h, name)
        if not h.dir(path).is_dir():
            raise IsolationError(
                f"student group {ctl}:{path} does not exist: run `milarun cgroups setup "
                f"--devices ...` as root (scripts/cgroup_setup.sh) or pass --no-cgexec"
            )
        groups[ctl] = path
        every.append(h.dir(path) / "cgroup.procs")
        if h.version == 1:
            prefix += ["-g", f"{ctl}:{path}"]
        else:
            procs.append(h.dir(path) / "cgroup.procs")
    if prefix:
        _need_tools()
        prefix = ["cgexec", *prefix]
    text = ";".join(f"{c}:{p}" for c, p in groups.items())
    return Placement(prefix, sorted(set(procs)), groups, text, sorted(set(every)))


def group_cpus(place: Placement, hier: dict[str, Hierarchy]) -> list[int]:
    """The CPUs of an instance's cpuset group ([] where it has none or they are unread)."""
    path = place.groups.get("cpuset")
    if path is None or "cpuset" not in hier:
        return []
    h = hier["cpuset"]
    text = read_file(h.dir(path) / "cpuset.cpus") or read_file(
        h.dir(path) / "cpuset.cpus.effective"
    )
    return parse_cpu_list((text or "").strip())


def join_groups(procs: list[Path] | list[str]) -> None:
    """Move this process into the groups of these cgroup.procs files (v1 or v2), as cgexec
    does: in a cold start's child before exec (v2), in a forked instance (both)."""
    for path in procs:
        with open(path, "w") as f:
            f.write(str(os.getpid()))


def group_pids(groups: dict[str, str], hier: dict[str, Hierarchy]) -> list[int]:
    """The processes in an instance's groups (v1 and v2 both list them in cgroup.procs)."""
    pids: set[int] = set()
    for ctl, path in groups.items():
        if ctl in hier:
            text = read_file(hier[ctl].dir(path) / "cgroup.procs") or ""
            pids |= {int(w) for w in text.split() if w.isdigit()}
    return sorted(pids)


def kill_group(groups: dict[str, str], hier: dict[str, Hierarchy]) -> list[int]:
    """SIGKILL what is left in an instance's groups once it ended (a child that left its
    process group, e.g. by setsid, is still in its cgroup); returns the pids."""
    import signal

    pids = group_pids(groups, hier)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def oom_kills(groups: dict[str, str], hier: dict[str, Hierarchy]) -> int | None:
    """The memory group's OOM-kill counter (None when unknown)."""
    path = groups.get("memory")
    if path is None or "memory" not in hier:
        return None
    h = hier["memory"]
    name = "memory.oom_control" if h.version == 1 else "memory.events"
    for line in (read_file(h.dir(path) / name) or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None
