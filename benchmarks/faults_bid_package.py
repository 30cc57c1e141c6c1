"""The fault campaign, bid packages under faults (issue 40). `milarun verify` of a truncated
package, of members that escape (``../x``, an absolute path, links), of a member longer than its
header says, of bytes appended after the archive, of a decompression bomb, of results from
another milarun, of a package replaced while it is read (a package re-hashed after a rate was
edited: faults_forgery.py, issue 42): each refused in one line or judged by a rule (exit 1
either way), nothing written outside its temporary folder, its memory and disk bounded. (A
machine pushed past its limits: faults_limits.py.) Run by faults.py."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
from faultkit import ENV, Outcome, clean, milarun, one_line

import bidkit

RATES = {"quick.polynome": 1000.0, "quick.convnet": 50.0}
Member = tuple[tarfile.TarInfo, bytes | None]


# -- packages -------------------------------------------------------------------------------
def good_package(tmp: Path, log_mb: int = 0) -> tuple[Path, Path]:
    """A bid package of a synthetic quick run (with ``log_mb`` MiB of random log, so that
    reading it takes a while) and its tender."""
    run = bidkit.synthetic_run(tmp / "run", RATES)
    if log_mb:
        (run / "logs").mkdir(exist_ok=True)
        (run / "logs" / "big.log").write_bytes(os.urandom(log_mb << 20))
    tender = bidkit.tender(tmp / "tender.json", [t.split(".")[1] for t in RATES])
    out = tmp / f"bid{log_mb}.tar.gz"
    done = milarun("package", run, "-o", out)
    assert done.returncode == 0, done.stderr
    return out, tender


def members_of(package: Path) -> list[Member]:
    with tarfile.open(package) as tar:
        found: list[Member] = []
        for m in tar:
            source = tar.extractfile(m) if m.isreg() else None
            found.append((m, source.read() if source else None))
        return found


def tar_gz(path: Path, members: list[Member], grow: str = "") -> Path:
    """A .tar.gz of ``members`` as given; the data of the member named ``grow`` runs 4 KiB
    past the size its header says."""
    raw = io.BytesIO()
    for info, data in members:
        raw.write(info.tobuf(tarfile.PAX_FORMAT))
        if data is not None:
            data += b"X" * 4096 if info.name == grow else b""
            raw.write(data + b"\0" * (-len(data) % 512))
    raw.write(b"\0" * 1024)
    path.write_bytes(gzip.compress(raw.getvalue()))
    return path


def odd_member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    data = b"x" if kind == tarfile.REGTYPE else None
    info.size = len(data or b"")
    return info, data


@dataclass
class Verified:
    done: subprocess.CompletedProcess
    peak_rss: int  # bytes
    peak_temp: int  # bytes in its temporary folder at most
    temp_left: list[str]

    def said(self) -> str:
        line = (self.done.stderr.strip().splitlines() or [""])[-1]
        fails = [x.split()[1] for x in self.done.stdout.splitlines() if x.startswith("FAIL")]
        return (
            f"exit {self.done.returncode}, {self.peak_rss / 2**20:.0f} MiB, temp "
            f"{self.peak_temp / 2**20:.0f} MiB{', FAIL ' + ','.join(fails) if fails else ''}"
            f"{': ' + repr(line[-90:]) if line else ''}"
        )


def _size(folder: Path) -> int:
    total = 0
    for top, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_size
            except OSError:
                pass
    return total


def verify(
    tmp: Path, package: Path, tender: Path, meanwhile: Callable[[Path], None] | None = None
) -> Verified:
    """`milarun verify` with its own TMPDIR, watched: peak memory and temporary bytes, and
    what it left there; ``meanwhile(tmpdir)`` is called while it runs."""
    tmpdir = tmp / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "milarun", "verify", str(package), "--tender", str(tender)],
        env={**ENV, "TMPDIR": str(tmpdir)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    rss = temp = 0
    watched = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            rss = max(rss, watched.memory_info().rss)
        except psutil.Error:
            pass
        temp = max(temp, _size(tmpdir))
        if meanwhile is not None:
            meanwhile(tmpdir)
        time.sleep(0.02)
    stdout, stderr = proc.communicate(timeout=60)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return Verified(done, rss, temp, [p.name for p in tmpdir.iterdir()])


def _outside(tmp: Path, before: set[Path]) -> list[str]:
    """Files below the scenario's folder that verify made outside its TMPDIR."""
    return [
        str(p.relative_to(tmp))
        for p in tmp.rglob("*")
        if p not in before and tmp / "tmpdir" not in p.parents and p.name != "tmpdir"
    ]


# -- scenarios ------------------------------------------------------------------------------
def hostile_packages(tmp: Path) -> Outcome:
    """Truncated, members escaping or linking out, a member longer than its header, bytes
    appended after the archive, a decompression bomb: each refused in one line, exit 1,
    nothing written outside the temporary folder (left empty), memory and disk bounded."""
    good, tender = good_package(tmp)
    members = members_of(good)
    data = good.read_bytes()
    absolute = f"/tmp/milarun-fault-{uuid.uuid4().hex[:8]}"
    # MANIFEST first: every file it lists comes before the long member, the last one
    listing = [m for m in members if m[0].name == "MANIFEST"]
    others = [m for m in members if m[0].name != "MANIFEST"]
    zeros = tarfile.TarInfo("run/zeros.json")  # 256 MiB in ~256 KiB
    zeros.size = 256 << 20
    with_one = lambda *odd: [*members, odd_member(*odd)]  # noqa: E731
    made: dict[str, Path] = {
        "truncated": tmp / "cut.tar.gz",
        "../x": tar_gz(tmp / "dotdot.tar.gz", with_one("../escaped")),
        "absolute": tar_gz(tmp / "abs.tar.gz", with_one(absolute)),
        "symlink": tar_gz(tmp / "sym.tar.gz", with_one("run/l", tarfile.SYMTYPE, "/etc/passwd")),
        "hard link": tar_gz(tmp / "hard.tar.gz", with_one("run/h", tarfile.LNKTYPE, "../x")),
        "longer than its header": tar_gz(
            tmp / "long.tar.gz", [*listing, *others], others[-1][0].name
        ),
        "appended": tmp / "appended.tar.gz",
        "bomb": tar_gz(tmp / "bomb.tar.gz", [(zeros, bytes(zeros.size)), *members]),
    }
    made["truncated"].write_bytes(data[: len(data) * 3 // 5])
    made["appended"].write_bytes(data + gzip.compress(b"unverified" * 1000))
    before = set(tmp.rglob("*"))
    said, ok = {}, True
    for label, package in made.items():
        found = verify(tmp, package, tender)
        fine = one_line(found.done) and "refused" in found.done.stderr and not found.temp_left
        fine = fine and found.peak_rss < 1 << 30 and found.peak_temp < 200 << 20
        ok = ok and fine
        said[label] = ("" if fine else "NOT REFUSED: ") + found.said()
    escaped = [p for p in (tmp.parent / "escaped", Path(absolute)) if p.exists()]
    outside = _outside(tmp, before)
    ok = ok and not escaped and not outside
    return ok, 0, f"{said}; escaped {escaped}, written outside {outside}"


def another_version(tmp: Path) -> Outcome:
    """Results of another milarun in a well-formed package: the version rule FAILs (exit 1);
    a package whose bid.json is of a format this milarun does not know: refused in one line."""
    good, tender = good_package(tmp)

    def older(data: dict) -> None:
        data["milarun_version"] = "0.0.1"

    def future(folder: Path) -> None:
        (folder / "bid.json").write_text(
            (folder / "bid.json").read_text().replace('"format": 1', '"format": 99')
        )

    old = verify(
        tmp, bidkit.edited(good, tmp, lambda f: bidkit.edit_results(f, older, False)), tender
    )
    (tmp / "edited.tar.gz").rename(tmp / "old.tar.gz")
    new = verify(tmp, bidkit.edited(good, tmp, future), tender)
    ok = old.done.returncode == 1 and "FAIL  version" in old.done.stdout and clean(old.done)
    ok = ok and one_line(new.done) and "format" in new.done.stderr
    return ok, 0, f"results of 0.0.1: {old.said()}; bid.json format 99: {new.said()}"


def _rules(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]


def replaced_while_read(tmp: Path) -> Outcome:
    """The package replaced while verify reads it: renamed over (verify reads the file it
    opened, whole: the verdict of that package), then rewritten in place (refused in one
    line, or that verdict): never a mix, no traceback, nothing left in the temporary folder."""
    first, tender = good_package(tmp / "a", log_mb=64)
    other, _ = good_package(tmp / "b", log_mb=8)
    alone = verify(tmp, first, tender).done  # its verdict, untouched
    path = tmp / "bid.tar.gz"
    outcomes = {}
    for way in ("renamed over", "rewritten in place"):
        path.write_bytes(first.read_bytes())
        done: list[bool] = []

        def replace(tmpdir: Path, way: str = way, done: list[bool] = done) -> None:
            if done or not any(tmpdir.glob("milarun-verify-*/run")):
                return  # not yet extracting
            done.append(True)
            if way == "renamed over":
                (tmp / "next.tar.gz").write_bytes(other.read_bytes())
                os.replace(tmp / "next.tar.gz", path)
            else:
                with open(path, "r+b") as f:
                    f.truncate(0)
                    f.write(other.read_bytes())

        found = verify(tmp, path, tender, replace)
        same = found.done.returncode == alone.returncode and _rules(found.done) == _rules(alone)
        fine = clean(found.done) and not found.temp_left and bool(done)
        fine = fine and (same if way == "renamed over" else same or one_line(found.done))
        outcomes[way] = (fine, ("" if done else "not replaced in time: ") + found.said())
    return all(f for f, _ in outcomes.values()), 0, str({k: s for k, (_, s) in outcomes.items()})


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "bid: hostile packages": hostile_packages,
    "bid: another milarun version": another_version,
    "bid: replaced while verified": replaced_while_read,
}
