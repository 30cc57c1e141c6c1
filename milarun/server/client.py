"""`milarun push`: a results folder (packed once as a bid package, the pack kept) or a bid
package sent to a results server, with progress and retries.

The package's SHA-256 is its identity on the server: a retry after a lost connection sends
the same bytes, and the server answers that it has them (the first try got through) or
takes them (it did not); nothing is stored twice. A folder is packed once per state of its
files (the pack is kept in the user's cache), so pushing it again is the same package.
Whatever the server or the network does, the package stays on disk, and the error says where.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from milarun.errors import PushError, UsageError

CHUNK = 1 << 20
RETRY_STATUS = (429, 502, 503, 504)  # too fast, or the server or its database away for now
KEY_ENV = "MILARUN_KEY"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "milarun" / "push"


def read_key(key_file: str | None) -> str:
    """The key from --key-file, else $MILARUN_KEY (never from the command line)."""
    if key_file is not None:
        try:
            text = Path(key_file).read_text(encoding="utf-8", errors="replace")[:4096]
        except OSError as err:
            raise UsageError(f"--key-file {key_file}: {err.strerror}") from None
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if not lines:
            raise UsageError(f"--key-file {key_file}: empty; put the key alone in it")
        return lines[-1]
    if os.environ.get(KEY_ENV):
        return os.environ[KEY_ENV].strip()
    raise UsageError(f"no key: set {KEY_ENV} or give --key-file FILE (`milarun serve keys add`)")


def _folder_state(folder: Path) -> str:
    """A hash of the folder's path and every file's name, size and time."""
    digest = hashlib.sha256(str(folder.resolve()).encode())
    for dirpath, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            stat = (Path(dirpath) / name).lstat()
            digest.update(f"{dirpath}/{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def package_of(source: Path, say: Callable[[str], None]) -> Path:
    """The package to push: ``source`` itself, or the folder packed (once per state)."""
    if source.is_file():
        return source
    if not source.is_dir():
        raise UsageError(f"{source}: no such results folder or bid package")
    from milarun.tender.package import make_package

    out = cache_dir() / f"{source.name[:60]}-{_folder_state(source)}.tar.gz"
    if out.is_file():
        say(f"packed before: {out}")
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    packed = make_package(source, out)
    say(f"packed {packed.results} result(s) into {out}")
    return out


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Target:
    server: str
    key: str
    params: dict[str, Any]


def _chunks(path: Path, progress: Callable[[int, int], None]) -> Iterator[bytes]:
    size, sent = path.stat().st_size, 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sent += len(chunk)
            progress(sent, size)
            yield chunk


def push(
    package: Path,
    target: Target,
    say: Callable[[str], None],
    progress: Callable[[int, int], None],
    retries: int = 5,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Send ``package``; the server's answer. PushError (the package kept) when it fails."""
    digest = sha256_of(package)
    url = target.server.rstrip("/") + "/api/uploads"
    auth = {"Authorization": f"Bearer {target.key}"}
    headers = {
        **auth,
        "X-Content-SHA256": digest,
        "Content-Type": "application/gzip",
        "Content-Length": str(package.stat().st_size),
    }
    kept = f"the package is kept: {package}"
    why = ""
    for attempt in range(retries + 1):
        if attempt:
            wait = min(30.0, 0.5 * 2**attempt)
            say(f"retry {attempt} of {retries} in {wait:.0f} s ({why})")
            time.sleep(wait)
        try:
            with httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0)) as client:
                before = client.get(f"{target.server.rstrip('/')}/api/push/{digest}", headers=auth)
                if before.status_code == 200:  # else the upload's own answer says why
                    known = before.json()
                    if known["upload"] is not None:  # a try before got through
                        return dict(known["upload"])
                    if package.stat().st_size > known["limit_bytes"]:
                        raise PushError(
                            f"{package}: {package.stat().st_size:,} bytes, over the server's "
                            f"limit of {known['limit_bytes']:,} bytes; {kept}"
                        )
                answer = client.post(
                    url, params=target.params, headers=headers, content=_chunks(package, progress)
                )
        except httpx.TransportError as err:
            why = f"{type(err).__name__}: {str(err)[:200] or 'connection lost'}"
            continue
        if answer.status_code in RETRY_STATUS:
            why = f"{answer.status_code}: {_detail(answer)}"
            continue
        if answer.status_code >= 400:
            raise PushError(
                f"{target.server} refused it ({answer.status_code}): {_detail(answer)}; {kept}"
            )
        found: dict[str, Any] = answer.json()
        return found
    raise PushError(f"{target.server}: not pushed after {retries + 1} tries ({why}); {kept}")


def _detail(answer: httpx.Response) -> str:
    try:
        detail = answer.json().get("detail")
    except ValueError:
        detail = answer.text
    return str(detail)[:500].replace("\n", " ")
