"""A bid package is untrusted input: each hostile or damaged one is refused in one line,
with nothing written outside the temporary folder, in bounded memory."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import tempfile
from pathlib import Path

import pytest

import bidkit
from conftest import milarun, one_line_error
from milarun import errors
from milarun.tender import archive, verify
from milarun.tender.package import BID, make_package


def tar_of(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    """A .tar.gz of hand-made members (``None``: no data, as for links and devices)."""
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, **fields) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def manifest_of(files: dict[str, bytes]) -> bytes:
    import hashlib

    return "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in files.items()).encode()


def refused(package: Path, tmp_path: Path, limits: archive.Limits = archive.DEFAULT_LIMITS) -> str:
    dest = Path(tempfile.mkdtemp(prefix="dest", dir=tmp_path))
    with pytest.raises(errors.PackageRefused) as caught:
        hashes = archive.extract(package, dest, limits)
        archive.read_manifest(dest, hashes, package)
    message = str(caught.value)
    assert "\n" not in message and str(package) in message
    return message


ESCAPES = [
    ("../escaped.txt", tarfile.REGTYPE, {}, "'..'"),
    ("run/../../escaped.txt", tarfile.REGTYPE, {}, "'..'"),
    ("/tmp/milarun-escaped-absolute.txt", tarfile.REGTYPE, {}, "absolute path"),
    ("run/link", tarfile.SYMTYPE, {"linkname": "/etc/passwd"}, "a link"),
    ("run/hard", tarfile.LNKTYPE, {"linkname": "../outside"}, "a link"),
    ("run/tty", tarfile.CHRTYPE, {"devmajor": 5, "devminor": 0}, "a device"),
    ("run/disk", tarfile.BLKTYPE, {"devmajor": 8, "devminor": 0}, "a device"),
    ("run/fifo", tarfile.FIFOTYPE, {}, "a FIFO"),
]


@pytest.mark.parametrize("name,kind,fields,why", ESCAPES, ids=[e[0] for e in ESCAPES])
def test_members_that_escape_or_are_not_files_are_refused(tmp_path, name, kind, fields, why):
    data = b"x" if kind == tarfile.REGTYPE else None
    package = tar_of(tmp_path / "bid.tar.gz", [(member(name, kind, **fields), data)])
    assert why in refused(package, tmp_path)
    assert not (tmp_path / "escaped.txt").exists()
    assert not Path("/tmp/milarun-escaped-absolute.txt").exists()
    assert [p for p in tmp_path.rglob("*") if p.parent != tmp_path] == []


def test_a_member_larger_than_the_limit_is_refused_from_its_header(tmp_path):
    # the header claims 3 GiB; no data follows: refused before a byte is read
    header = member("run/huge.json", size=3 << 30).tobuf(tarfile.PAX_FORMAT)
    package = tmp_path / "bid.tar.gz"
    package.write_bytes(gzip.compress(header))
    assert "3,072 MiB, more than 1,024 MiB" in refused(package, tmp_path)


def test_an_extended_header_too_large_to_hold_is_refused(tmp_path):
    info = member("run/a.json", pax_headers={"comment": "x" * (2 << 20)})
    package = tar_of(tmp_path / "bid.tar.gz", [(info, b"{}")])
    assert "extended header of 2 MiB" in refused(package, tmp_path)


def test_a_decompression_bomb_is_refused_past_its_ratio(tmp_path):
    zeros = b"\0" * (4 << 20)
    package = tar_of(tmp_path / "bid.tar.gz", [(member("run/zeros.json"), zeros)])
    small = archive.Limits(slack=1 << 20)  # 4 MiB of zeros from ~4 KiB: ratio ~1000
    assert "decompression bomb" in refused(package, tmp_path, small)


def test_too_many_members_and_duplicates_are_refused(tmp_path):
    many = tar_of(tmp_path / "many.tar.gz", [(member(f"run/{i}"), b"") for i in range(5)])
    assert "more than 4 members" in refused(many, tmp_path, archive.Limits(members=4))
    twice = tar_of(tmp_path / "twice.tar.gz", [(member("run/a"), b"1"), (member("run/a"), b"2")])
    assert "twice" in refused(twice, tmp_path)


@pytest.mark.parametrize(
    "content,why",
    [
        (b"", "not a readable"),
        (os.urandom(4096), "not a readable"),
        (gzip.compress(b"not a tar archive at all" * 40), "not a readable"),
    ],
    ids=["empty", "random", "gzip-of-text"],
)
def test_a_corrupt_archive_is_refused(tmp_path, content, why):
    package = tmp_path / "bid.tar.gz"
    package.write_bytes(content)
    assert why in refused(package, tmp_path)


def test_a_truncated_archive_is_refused(tmp_path):
    files = {"run/a.json": os.urandom(200_000)}
    whole = tar_of(tmp_path / "whole.tar.gz", [(member(n), d) for n, d in files.items()])
    cut = tmp_path / "bid.tar.gz"
    cut.write_bytes(whole.read_bytes()[:50_000])
    assert "not a readable" in refused(cut, tmp_path)


def test_a_manifest_naming_absent_files_or_none_at_all_is_refused(tmp_path):
    files = {"run/a.json": b"{}"}
    listing = manifest_of({**files, "run/gone.json": b"{}"})
    package = tar_of(
        tmp_path / "bid.tar.gz",
        [(member(n), d) for n, d in files.items()] + [(member(archive.MANIFEST), listing)],
    )
    assert "does not hold, e.g. 'run/gone.json'" in refused(package, tmp_path)
    bare = tar_of(tmp_path / "bare.tar.gz", [(member("run/a.json"), b"{}")])
    assert "no MANIFEST" in refused(bare, tmp_path)


def test_verify_refuses_a_hostile_package_in_one_line(tmp_path):
    """Through the real command: one line, exit 1, nothing written beside the package."""
    package = tar_of(tmp_path / "bid.tar.gz", [(member("../../escaped.txt"), b"x")])
    tender = bidkit.tender(tmp_path / "tender.json", ["polynome"])
    done = milarun("verify", package, "--tender", tender)
    line = one_line_error(done)
    assert line.startswith("milarun: error:") and "refused" in line and "'..'" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bid.tar.gz", "tender.json"]
    assert done.returncode == 1


def test_verify_removes_its_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    (tmp_path / "t").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)
    package = tar_of(tmp_path / "bid.tar.gz", [(member("run/fifo", tarfile.FIFOTYPE), None)])
    tender = bidkit.tender(tmp_path / "tender.json", ["polynome"])
    with pytest.raises(errors.PackageRefused):
        verify.verify(package, tender)
    assert list((tmp_path / "t").iterdir()) == []


def _long_last_member(path: Path, files: dict[str, bytes]) -> Path:
    """The MANIFEST first (every file it lists is there), then the files, the last one's
    data 4 KiB longer than its header says: tarfile would stop quietly at that data."""
    raw = io.BytesIO()
    entries = [(archive.MANIFEST, manifest_of(files)), *files.items()]
    for i, (name, data) in enumerate(entries):
        raw.write(member(name, size=len(data)).tobuf(tarfile.PAX_FORMAT))
        data += b"X" * 4096 if i == len(entries) - 1 else b""
        raw.write(data + b"\0" * (-len(data) % 512))
    path.write_bytes(gzip.compress(raw.getvalue() + b"\0" * 1024))
    return path


def test_a_member_longer_than_its_header_says_is_refused(tmp_path):
    """Issue 40: was read up to its header's size, the rest of the archive never looked at."""
    package = _long_last_member(tmp_path / "bid.tar.gz", {"run/a.json": b"{}", "run/b": b"1"})
    message = refused(package, tmp_path)
    assert "not a readable .tar.gz (after member 'run/b'" in message
    assert "longer than its header" in message


def test_bytes_appended_after_the_archive_are_refused(tmp_path):
    """Issue 40: a second gzip member after the archive's end was never read."""
    files = {"run/a.json": b"{}"}
    package = tar_of(
        tmp_path / "bid.tar.gz",
        [(member(n), d) for n, d in files.items()]
        + [(member(archive.MANIFEST), manifest_of(files))],
    )
    package.write_bytes(package.read_bytes() + gzip.compress(b"not in the MANIFEST" * 100))
    assert "bytes after the end of the archive" in refused(package, tmp_path)


def test_a_bid_of_a_format_this_milarun_does_not_read_is_refused(tmp_path):
    """Issue 40: a package from a newer milarun (bid.json format 2) was read as format 1."""
    run = bidkit.synthetic_run(tmp_path / "run", {"quick.polynome": 1000.0}, repeat=1)
    good = make_package(run, tmp_path / "bid.tar.gz").out

    def newer(folder: Path) -> None:
        bid = folder / BID
        bid.write_text(bid.read_text().replace('"format": 1', '"format": 2'))

    newer_package = bidkit.edited(good, tmp_path, newer)
    dest = Path(tempfile.mkdtemp(dir=tmp_path))
    with pytest.raises(errors.PackageRefused, match=r"bid.json is of format 2 .*reads format 1"):
        verify.open_package(newer_package, dest)
