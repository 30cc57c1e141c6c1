"""A real full disk for tests and benchmarks/faults.py: a small tmpfs filled to its last byte;
and a read-only one."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def full_tmpfs(folder: Path, size: str = "64k", fill: bool = True) -> Iterator[Path]:
    """Mount a ``size`` tmpfs on ``folder`` (created; needs root), fill it until writing fails
    with ENOSPC (unless ``fill`` is false: then call fill_up when the test wants it full),
    yield it, and unmount it whatever happened."""
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder], check=True)
    try:
        if fill:
            fill_up(folder)
        yield folder
    finally:
        subprocess.run(["umount", folder], check=True)


def fill_up(folder: Path) -> None:
    """Write into ``folder`` until the disk is full (ENOSPC)."""
    try:
        with open(folder / "filler", "ab") as f:
            while True:
                f.write(b"\0" * 1024)
                f.flush()
    except OSError:
        pass


@contextlib.contextmanager
def read_only_tmpfs(
    folder: Path, fill: Callable[[Path], None], size: str = "16m"
) -> Iterator[Path]:
    """Mount a ``size`` tmpfs on ``folder`` (needs root), let ``fill`` write into it, remount
    it read-only (what root cannot write either: a shared read-only copy), yield it, and
    unmount it whatever happened."""
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder], check=True)
    try:
        fill(folder)
        subprocess.run(["mount", "-o", "remount,ro", folder], check=True)
        yield folder
    finally:
        subprocess.run(["umount", folder], check=True)
