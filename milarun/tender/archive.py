"""The bid package on disk: a gzipped tar with a ``MANIFEST`` of the SHA-256 of every file
(``sha256sum -c MANIFEST`` checks it without milarun).

Writing is plain. Reading treats the file as hostile: it is streamed once, member by
member, into a folder the caller owns (a temporary one), with every path, type and size
checked before a byte is written, in bounded memory: members escaping the folder (``../``,
absolute paths), links, devices, FIFOs, duplicate names, too many members, a member or a
total too large, a decompression bomb (more bytes out than a bounded ratio of bytes in),
a damaged archive (a member longer than its header says, bytes after its end, a gzip
checksum that does not match) and a MANIFEST naming absent files are each refused in one
line.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import tarfile
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from milarun.errors import PackageRefused, TenderError

MANIFEST = "MANIFEST"
CHUNK = 1 << 20
_LINE = re.compile(r"([0-9a-f]{64})  (\S.*)")


@dataclass(frozen=True)
class Limits:
    """What a package may hold. A log may grow by 1 GiB in a run (MILARUN_LOG_LIMIT_MB)."""

    members: int = 200_000
    member_bytes: int = 1 << 30
    total_bytes: int = 16 << 30
    ratio: float = 500.0  # bytes out per compressed byte in (gzip of zeros: ~1000)
    slack: int = 32 << 20  # a small package may expand beyond the ratio by this much
    name_chars: int = 1024
    depth: int = 32


DEFAULT_LIMITS = Limits()


# -- writing -------------------------------------------------------------------------------
class _Hashing(io.RawIOBase):
    """A file read through, its SHA-256 kept."""

    def __init__(self, f: io.BufferedReader):
        self.f, self.digest = f, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        self.digest.update(data)
        return data


def write_package(out: Path, members: Iterable[tuple[str, Path | bytes]]) -> tuple[int, int]:
    """Write ``out`` (never over an existing file) from (name in the package, file or bytes)
    pairs, then the MANIFEST; returns (files, bytes in)."""
    if out.exists():
        raise TenderError(f"-o {out}: file exists; choose another name")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    hashes: dict[str, str] = {}
    total = 0
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tar:
            for name, source in members:
                info = tarfile.TarInfo(name)
                info.mode, info.uid, info.gid, info.uname, info.gname = 0o644, 0, 0, "", ""
                if isinstance(source, bytes):
                    info.size, info.mtime = len(source), int(time.time())
                    tar.addfile(info, io.BytesIO(source))
                    hashes[name] = hashlib.sha256(source).hexdigest()
                else:
                    with open(source, "rb") as f:
                        stat = os.fstat(f.fileno())
                        info.size, info.mtime = stat.st_size, int(stat.st_mtime)
                        reader = _Hashing(f)
                        tar.addfile(info, reader)
                        hashes[name] = reader.digest.hexdigest()
                total += info.size
            listing = "".join(f"{h}  {n}\n" for n, h in sorted(hashes.items())).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mode = len(listing), 0o644
            tar.addfile(info, io.BytesIO(listing))
        os.link(tmp, out)
    except FileExistsError:
        raise TenderError(f"-o {out}: file exists; choose another name") from None
    except OSError as err:
        raise TenderError(f"{out}: cannot write the package ({err.strerror or err})") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return len(hashes), total


# -- reading -------------------------------------------------------------------------------
class _Bounded(io.RawIOBase):
    """The decompressed stream, refused once it yields more than ``limit`` bytes."""

    def __init__(self, stream: gzip.GzipFile, limit: int, what: str):
        self.stream, self.limit, self.what, self.count = stream, limit, what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.stream.read(len(buffer))
        self.count += len(data)
        if self.count > self.limit:
            raise PackageRefused(self.what)
        buffer[: len(data)] = data
        return len(data)


MAX_HEADER = 1 << 20  # a pax or GNU long-name header: tarfile reads it whole into memory


class _HeaderTooLarge(Exception):
    pass


# the header errors on which tarfile ends an archive quietly past its first member (not in
# the stubs: read by name)
_QUIET_ENDS: tuple[type[Exception], ...] = tuple(
    getattr(tarfile, name)
    for name in ("InvalidHeaderError", "EmptyHeaderError", "TruncatedHeaderError")
)


class _NotAHeader(Exception):
    """Where tarfile would end the archive quietly: a block that is no header (the data of
    the member before it longer than its header says) or an archive cut off without its
    end marker. What follows would go unread, unverified."""


class _BoundedInfo(tarfile.TarInfo):
    """Headers whose extended data (pax records, GNU long names) tarfile would read into
    memory whole are refused beyond MAX_HEADER, before they are read; a block that is no
    header is an error, not the quiet end of the archive tarfile makes of it."""

    @classmethod
    def fromtarfile(cls, tar: tarfile.TarFile) -> _BoundedInfo:
        try:
            return super().fromtarfile(tar)
        except _QUIET_ENDS as err:
            raise _NotAHeader(str(err)) from None

    def _proc_pax(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        self._bound()
        return super()._proc_pax(tar)  # type: ignore[misc]

    def _proc_gnulong(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        self._bound()
        return super()._proc_gnulong(tar)  # type: ignore[misc]

    def _bound(self) -> None:
        if self.size > MAX_HEADER:
            raise _HeaderTooLarge(
                f"an extended header of {self.size / 2**20:,.0f} MiB (at most "
                f"{MAX_HEADER // 2**20} MiB)"
            )


def _check_name(name: str, limits: Limits) -> str | None:
    """Why a member's name is unsafe, or None."""
    if len(name) > limits.name_chars or not name.isprintable() or "\\" in name:
        return "an unprintable, overlong or backslashed name"
    if name.startswith("/"):
        return "an absolute path"
    parts = name.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "a path with '..', '.' or an empty part"
    if len(parts) > limits.depth:
        return f"a path deeper than {limits.depth} folders"
    return None


def _kind(member: tarfile.TarInfo) -> str | None:
    """What a member is when it is neither a regular file nor a folder."""
    if member.issym() or member.islnk():
        return f"a link to {member.linkname[:80]!r}"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a FIFO"
    if not (member.isreg() or member.isdir()) or member.issparse():
        return "not a regular file"
    return None


def extract(package: Path, dest: Path, limits: Limits = DEFAULT_LIMITS) -> dict[str, str]:
    """Extract ``package`` into the empty folder ``dest``; name -> SHA-256 of every file.
    PackageRefused, in one line naming the member, for anything unsafe or damaged."""
    try:
        size = os.stat(package).st_size
        raw = open(package, "rb")  # noqa: SIM115 (closed below, and on every error)
    except OSError as err:
        raise TenderError(f"{package}: cannot read ({err.strerror})") from None
    allowed = min(limits.total_bytes, int(size * limits.ratio) + limits.slack)
    bomb = (
        f"{package}: refused: expands beyond {allowed / 2**20:,.0f} MiB from "
        f"{size / 2**20:,.1f} MiB (a decompression bomb?)"
    )
    hashes = _Hashes()
    last = None
    try:
        with raw, gzip.GzipFile(fileobj=raw) as unzipped:
            stream = io.BufferedReader(_Bounded(unzipped, allowed, bomb), CHUNK)
            with tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedInfo) as tar:
                for member in tar:
                    _extract_member(tar, member, dest, limits, hashes, package)
                    last = member.name
                _end(tar, package)
    except PackageRefused:
        raise
    except _HeaderTooLarge as err:
        raise PackageRefused(f"{package}: refused: {err}") from None
    except _NotAHeader as err:
        where = (
            f"after member {last[:100]!r}: {err}; a member longer than its header says, or an "
            "archive cut short?"
            if last is not None
            else f"at its start: {err}; not a tar archive?"
        )
        raise PackageRefused(f"{package}: refused: not a readable .tar.gz ({where})") from None
    except (tarfile.TarError, OSError, EOFError, zlib.error, UnicodeError) as err:
        raise PackageRefused(
            f"{package}: refused: not a readable .tar.gz ({type(err).__name__}: {err})"[:300]
        ) from None
    return dict(hashes)


def _end(tar: tarfile.TarFile, package: Path) -> None:
    """After the end marker: only the zeros that pad a tar, to the end of the gzip stream
    (so that its checksum and length are checked too); bytes appended there were never
    in the MANIFEST's reach."""
    while chunk := tar.fileobj.read(CHUNK):
        if chunk.strip(b"\0"):
            raise PackageRefused(
                f"{package}: refused: bytes after the end of the archive (appended to it?)"
            )


class _Hashes(dict[str, str]):
    """name -> SHA-256 of the files extracted so far, and the folders made for them."""

    def __init__(self) -> None:
        super().__init__()
        self.folders: set[Path] = set()


def _extract_member(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    dest: Path,
    limits: Limits,
    hashes: _Hashes,
    package: Path,
) -> None:
    name = member.name
    shown = repr(name[:100])

    def refuse(why: str) -> PackageRefused:
        return PackageRefused(f"{package}: refused: member {shown} is {why}")

    why = _check_name(name, limits) or _kind(member)
    if why:
        raise refuse(why)
    try:  # the standard library's own rules for untrusted archives, as a second opinion
        tarfile.data_filter(member, str(dest))
    except tarfile.FilterError as err:
        raise refuse(f"refused by the 'data' filter ({err})") from None
    if len(hashes) >= limits.members:
        raise PackageRefused(f"{package}: refused: more than {limits.members:,} members")
    if member.size > limits.member_bytes:
        raise refuse(
            f"{member.size / 2**20:,.0f} MiB, more than {limits.member_bytes / 2**20:,.0f} MiB"
        )
    target = dest.joinpath(*name.rstrip("/").split("/"))
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    if name in hashes:
        raise refuse("in the package twice")
    if target.parent not in hashes.folders:  # one mkdir per folder, not per file
        target.parent.mkdir(parents=True, exist_ok=True)
        hashes.folders.add(target.parent)
    source = tar.extractfile(member)
    assert source is not None  # a regular file
    digest = hashlib.sha256()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        for chunk in iter(lambda: source.read(CHUNK), b""):
            digest.update(chunk)
            out.write(chunk)
    hashes[name] = digest.hexdigest()


def read_manifest(dest: Path, hashes: dict[str, str], package: Path) -> dict[str, str]:
    """The MANIFEST's name -> SHA-256; refused when it is missing, malformed, or names a
    file the package does not hold."""
    if MANIFEST not in hashes:
        raise PackageRefused(f"{package}: refused: no {MANIFEST} (not a milarun bid package)")
    listed: dict[str, str] = {}
    with open(dest / MANIFEST, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            found = _LINE.fullmatch(line.rstrip("\n"))
            if not found or found[2] in listed:
                raise PackageRefused(
                    f"{package}: refused: {MANIFEST} line {number} is not "
                    "'<sha256>  <file>' of a file listed once"
                )
            listed[found[2]] = found[1]
    absent = sorted(set(listed) - set(hashes))
    if absent:
        raise PackageRefused(
            f"{package}: refused: {MANIFEST} lists {len(absent)} file(s) the package does not "
            f"hold, e.g. {absent[0][:100]!r}"
        )
    return listed
