"""The cgroup file system: which hierarchy owns each controller, this process's group in it,
reading its files, and what cgroup v2 needs before a group may have children with controllers
(the controller available down the tree, and no process in the group itself)."""

from __future__ import annotations

import errno
import posixpath
from dataclasses import dataclass
from pathlib import Path

from milarun.errors import IsolationError

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpuset", "memory")
# cgroup v2 lets a non-root group hand controllers to its children only while it holds no
# process: setup moves the caller's processes into this leaf, and the leaf's parent stays
# the group that students live under.
V2_LEAF = "milarun.leaf"


# -- hierarchies -------------------------------------------------------------------------
@dataclass(frozen=True)
class Hierarchy:
    """Where one controller lives: its mount, cgroup version, and this process's group."""

    controller: str
    version: int
    mount: Path
    own: str  # this process's cgroup path inside the hierarchy ("/a/b")

    def path(self, name: str) -> str:
        """Path (from the hierarchy root) of a group ``name`` below our own group."""
        return posixpath.normpath(posixpath.join(self.own, name.strip("/")))

    def dir(self, path: str) -> Path:
        return self.mount / path.lstrip("/")


def own_cgroups(proc_file: str = "/proc/self/cgroup") -> dict[str, str]:
    """controller(s) -> cgroup path of this process (``""`` key for the v2 hierarchy)."""
    groups: dict[str, str] = {}
    try:
        with open(proc_file, encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3:
                    groups[parts[1]] = parts[2]
    except OSError:
        pass
    return groups


def find_hierarchies(
    mountinfo: str = "/proc/self/mountinfo", proc_cgroup: str = "/proc/self/cgroup"
) -> dict[str, Hierarchy]:
    """controller -> the hierarchy that owns it (v1 first, else the v2 unified tree)."""
    own = own_cgroups(proc_cgroup)
    found: dict[str, Hierarchy] = {}
    v2_mount = None
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(fields) < 5 or len(extra) < 3:
            continue
        fstype, mount, options = extra[0], Path(fields[4]), extra[2].split(",")
        if fstype == "cgroup":
            for ctl in CONTROLLERS:
                if ctl in options:
                    path = next((p for c, p in own.items() if ctl in c.split(",")), "/")
                    found[ctl] = Hierarchy(ctl, 1, mount, path)
        elif fstype == "cgroup2":
            v2_mount = mount
    if v2_mount is not None:
        try:
            available = (v2_mount / "cgroup.controllers").read_text().split()
        except OSError:
            available = []
        own_v2 = own.get("", "/")
        if posixpath.basename(own_v2) == V2_LEAF:
            own_v2 = posixpath.dirname(own_v2)
        for ctl in CONTROLLERS:
            if ctl not in found and ctl in available:
                found[ctl] = Hierarchy(ctl, 2, v2_mount, own_v2)
    return found


def read_file(path: Path) -> str | None:
    """A cgroup file's text, stripped; None when it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def limit_up(mount: Path, path: str, filename: str) -> int | None:
    """Smallest limit in ``filename`` from the group ``path`` up to the hierarchy root."""
    limits = []
    node = mount / path.lstrip("/")
    while True:
        text = read_file(node / filename)
        if text and text.isdigit() and int(text) < 2**62:
            limits.append(int(text))
        if node == mount or mount not in node.parents:
            break
        node = node.parent
    return min(limits) if limits else None


# -- cgroup v2: handing a controller down to the students ------------------------------------
def enable_v2(h: Hierarchy, path: str) -> bool:
    """Let the children of ``path`` use the controller; False when it already could."""
    control = h.dir(path) / "cgroup.subtree_control"
    if h.controller in (read_file(control) or "").split():
        return False
    try:
        with open(control, "w") as f:
            f.write(f"+{h.controller}")
    except OSError as err:
        if err.errno == errno.EBUSY:
            why = "it holds processes of its own (cgroup v2 allows none in a group with children)"
        elif err.errno == errno.ENOENT:
            why = "its parent does not hand the controller down"
        else:
            why = err.strerror or str(err)
        raise IsolationError(
            f"cannot enable {h.controller} for the children of {path} ({control}): {why}; "
            "run milarun as root from a group of its own (e.g. `systemd-run --scope -p "
            "Delegate=yes ...`) or pass --no-cgexec"
        ) from err
    return True


def delegate_v2(h: Hierarchy) -> list[str]:
    """Make the controller available in our own group: enable it in each ancestor's
    subtree_control, top down, from the nearest one whose children already have it (a
    group sees only what its parent enables). Returns the groups changed."""
    chain = ["/"]
    for part in h.own.strip("/").split("/") if h.own != "/" else []:
        chain.append(posixpath.join(chain[-1], part))
    missing = [
        parent
        for parent, child in zip(chain, chain[1:])
        if h.controller not in (read_file(h.dir(child) / "cgroup.controllers") or "").split()
    ]
    if not missing:
        return []
    top = chain.index(missing[0])
    return [p for p in chain[top:-1] if enable_v2(h, p)]


def vacate_v2(h: Hierarchy) -> int:
    """Move the processes of our own v2 group into its leaf so that it may have students;
    returns how many moved. The root group is exempt from the rule and is left alone."""
    procs = h.dir(h.own) / "cgroup.procs"
    pids = (read_file(procs) or "").split()
    if h.version != 2 or h.own == "/" or not pids:
        return 0
    leaf = h.dir(posixpath.join(h.own, V2_LEAF))
    leaf.mkdir(exist_ok=True)
    moved = 0
    for pid in pids:
        try:
            with open(leaf / "cgroup.procs", "w") as f:
                f.write(pid)
            moved += 1
        except ProcessLookupError:
            continue  # ended meanwhile
        except OSError as err:
            raise IsolationError(
                f"cannot move process {pid} from {h.own} into {leaf}: {err.strerror}"
            ) from err
    return moved
