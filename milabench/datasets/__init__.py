"""Datasets: the real data (download) or data made offline in the same layout (synthesize).

Every dataset module (``milabench.datasets.<name>``) provides:

- ``download(root: Path) -> Path``: fetch the real data from its legacy source into
  ``root`` in the legacy layout; returns the dataset folder.
- ``synthesize(root: Path, size: int, seed: int = 0, workers: int = 1) -> Path``: make
  ``size`` examples offline, in the same layout and file formats; deterministic for a seed;
  returns the dataset folder.
- ``DEFAULT_SIZE``: the size `milarun dataset --synthetic` uses without ``--size``.
- loaders used by the models (module specific, documented there), which call
  :func:`require` first so a missing dataset fails at once with the command that makes it.

A finished dataset folder holds a ``.milarun-dataset.json`` marker ({"synthetic", "size",
"seed"}); :func:`is_synthetic` reads it for the result's ``synthetic_data``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import multiprocessing
import os
import shutil
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

MARKER = ".milarun-dataset.json"
FETCH_TIMEOUT = 60.0  # seconds without a byte before a download gives up


class DataMissing(RuntimeError):
    """A benchmark's data is not there; the message says how to make it."""


def resolve(spec: str) -> Any:
    """``milabench.datasets:mnist`` or ``mnist`` -> the dataset module."""
    module, _, name = spec.rpartition(":")
    name = name or spec
    try:
        return importlib.import_module(f"{module or __name__}.{name}")
    except ModuleNotFoundError as err:
        if err.name and name in err.name:
            raise DataMissing(f"unknown dataset {spec!r} (known: {', '.join(known())})")
        raise


def known() -> list[str]:
    here = Path(__file__).parent
    return sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_"))


def require(folder: Path, name: str, root: Path) -> Path:
    """The dataset folder if it is complete; else DataMissing with the command to run."""
    if not (folder / MARKER).is_file():
        raise DataMissing(
            f"dataset {name} not found in {folder}: create it with "
            f"`milarun dataset {name} -d {root}` (real data) or "
            f"`milarun dataset {name} --synthetic -d {root}` (generated offline)")
    return folder


def marker(folder: Path) -> dict[str, Any] | None:
    """The finished dataset's marker ({"synthetic", "size", "seed", ...}), None if absent."""
    try:
        info = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def is_synthetic(folder: Path) -> bool | None:
    info = marker(folder)
    return bool(info["synthetic"]) if info is not None and "synthetic" in info else None


def describe(folder: Path) -> str:
    """What the finished folder holds, for messages: the real data or N synthetic examples."""
    info = marker(folder)
    if info is None:
        return "nothing finished"
    return f"{info.get('size')} synthetic examples" if info.get("synthetic") else "the real data"


def ready(folder: Path, synthetic: bool, size: int | None = None) -> bool:
    """True if ``folder`` already satisfies the request (nothing to do), False if it holds
    nothing finished; DataMissing if it holds other data, which is never mixed with or
    overwritten. A synthetic request is satisfied by the real data or by a synthetic set
    at least that big (the quick profile asks for a tiny one)."""
    info = marker(folder)
    if info is None:
        return False
    if not info.get("synthetic"):  # the real data satisfies every request
        return True
    if synthetic and (size is None or (info.get("size") or 0) >= size):
        return True
    want = f"{size} synthetic examples" if synthetic else "the real data"
    raise DataMissing(f"{folder} already holds {info.get('size')} synthetic examples; not "
                      f"replacing them with {want} (remove that folder or use another "
                      "--dataroot)")


def synthesis(base: Path, name: str, size: int, seed: int, write: Callable[[], Any],
              unit: str = "example", max_size: int | None = None) -> Path:
    """What every ``synthesize`` does around writing its files: check ``size``, keep
    finished data (see :func:`ready`), call ``write()``, then mark ``base`` complete with
    the size, the seed and the dict ``write`` returns (if any). Returns ``base``."""
    if size < 1 or (max_size is not None and size > max_size):
        need = f"1 to {max_size}" if max_size is not None else "at least 1"
        raise ValueError(f"{name}: size {size} (need {need} {unit}s)")
    if ready(base, True, size):  # finished data is never replaced
        return base
    info = write() or {}
    mark_complete(base, True, size=size, seed=seed, **info)
    return base


def real_data(base: Path, write: Callable[[], Any]) -> Path:
    """What every ``download`` does around fetching: nothing when finished data is there
    (real data is never mixed with or written over synthetic data), then ``write()``, then
    the marker with the dict ``write`` returns (if any). Returns ``base``."""
    if ready(base, False):
        return base
    mark_complete(base, False, **(write() or {}))
    return base


def mark_complete(folder: Path, synthetic: bool, **info: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_new(folder / MARKER, json.dumps({"synthetic": synthetic, **info}).encode(),
              replace=True)


def write_new(path: Path, data: bytes, replace: bool = False) -> bool:
    """Write a file atomically; an existing file is kept (False) unless ``replace``.

    Parallel generators never clobber each other's files: the content goes to a temporary
    file named after this process, then is hard-linked (or, with replace, renamed) into place.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not replace:
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    try:
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        if tmp.exists():
            tmp.unlink()
    return True


def item_seed(seed: int, *keys: Any) -> int:
    """A stable per-item seed (same on every machine and Python hash seed)."""
    text = ":".join(map(str, (seed, *keys))).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little")


def parallel(function: Callable[[Any], Any], items: Sequence[Any], workers: int = 1) -> list:
    """``function`` over ``items`` in ``workers`` processes (in order)."""
    if workers <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    with multiprocessing.get_context("fork").Pool(min(workers, len(items))) as pool:
        return pool.map(function, items, chunksize=max(1, len(items) // (4 * workers)))


def map_chunks(function: Callable[[Any], Any], count: int, workers: int,
               task: Callable[[range], Any] = lambda r: r) -> list:
    """``function`` over ``task(r)`` for ``count`` items cut into ranges ``r``, in
    ``workers`` processes (in order). Four chunks per worker: items differ in cost, and
    smaller chunks keep every worker busy to the end."""
    return parallel(function, [task(r) for r in chunks(count, 4 * max(1, workers))], workers)


def chunks(count: int, parts: int) -> list[range]:
    """Split range(count) into ``parts`` contiguous ranges (for parallel writers)."""
    parts = max(1, min(parts, count))
    step = -(-count // parts)
    return [range(i, min(i + step, count)) for i in range(0, count, step)]


def fetch(url: str, dest: Path, md5: str | None = None) -> Path:
    """Download ``url`` to ``dest`` (skipped when already there with the right checksum)."""
    if dest.exists() and (md5 is None or _md5(dest) == md5):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    print(f"downloading {url}", flush=True)
    # Without a timeout a server that stops answering hangs `milarun dataset` for ever; this
    # bounds the connection and each read (not the whole transfer), and the TimeoutError
    # (an OSError) reaches the operator as a network error or moves on to a mirror.
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as response, \
            open(tmp, "wb") as out:
        shutil.copyfileobj(response, out, length=1 << 20)
    if md5 is not None and _md5(tmp) != md5:
        tmp.unlink()
        raise DataMissing(f"{url}: checksum mismatch (expected md5 {md5}); try again")
    os.replace(tmp, dest)
    return dest


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_workers() -> int:
    return max(1, min(8, len(os.sched_getaffinity(0))))


def flatten(groups: Iterable[Iterable[Any]]) -> list[Any]:
    return [x for g in groups for x in g]
