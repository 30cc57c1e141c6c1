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
"seed"}); :func:`is_synthetic` reads it for the result's ``synthetic_data`` and
:func:`summary` for its ``dataset``. A synthetic set being written holds
``.milarun-partial.json`` instead (what is being made) until the marker replaces it: an
interrupted generation is refused by :func:`require` and completed by the next identical
request (files are written atomically, so those already there are whole and kept).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

# How a dataset is made (progress, seeds, worker processes): here for the dataset modules
# (_workers: a leading underscore, as it is no dataset, see known())
from milabench.datasets._workers import chunks as chunks
from milabench.datasets._workers import default_workers as default_workers
from milabench.datasets._workers import flatten as flatten
from milabench.datasets._workers import item_seed as item_seed
from milabench.datasets._workers import map_chunks as map_chunks
from milabench.datasets._workers import parallel as parallel
from milabench.datasets._workers import progress as progress

MARKER = ".milarun-dataset.json"
PARTIAL = ".milarun-partial.json"  # a synthetic set being written: what it will be
STALE_TEMP_AGE = 3600.0  # a temporary file this old has no live writer, wherever it ran
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
            raise DataMissing(f"unknown dataset {spec!r} (known: {', '.join(known())})") from err
        raise


def known() -> list[str]:
    here = Path(__file__).parent
    return sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_"))


# The datasets each test reads, by its experiment module: `milarun doctor --profile` checks a
# profile's data from this table without importing a model (tests/doctor/test_doctor.py keeps it
# equal to what each model imports from milabench.datasets).
READ_BY = {
    "milabench.models.vae": ("mnist",),
    "milabench.models.reso": ("bsds500",),
    "milabench.models.loader": ("fake_imagenet",),
    "milabench.models.convnet": ("fake_imagenet",),
    "milabench.models.dcgan": ("fake_imagenet",),
    "milabench.models.fast_style": ("fake_imagenet",),
    "milabench.models.ssd": ("coco",),
    "milabench.models.wlm": ("wiki2",),
    "milabench.models.recom": ("ml20m",),
    "milabench.models.translator": ("wmt16",),
}

# Bytes on disk, approximately: (the real data as `download` leaves it, one synthetic example
# with its share of val/test). Real: the legacy archives' published sizes, extracted (COCO
# 2017 train+val images and annotations ~20 GB; MovieLens-20M plus the NCF files ~2 GB; WMT16
# archives, corpora and BPE files ~6 GB); fake ImageNet is generated at 176 kB an image (17.6
# GB). Per synthetic example: measured with `milarun dataset NAME --synthetic` at the quick
# profile's sizes.
DISK_BYTES = {
    "mnist": (67e6, 1e3),
    "bsds500": (150e6, 50e3),
    "coco": (20e9, 82e3),
    "fake_imagenet": (17.6e9, 176e3),
    "wiki2": (13e6, 6.0),
    "wmt16": (6e9, 900.0),
    "ml20m": (2e9, 8e3),
}


def disk_bytes(name: str, synthetic_size: int | None = None) -> float:
    """About how many bytes ``name`` takes: the real data, or ``synthetic_size`` examples."""
    real, per_example = DISK_BYTES[name]
    return real if synthetic_size is None else per_example * synthetic_size


def require(folder: Path, name: str, root: Path) -> Path:
    """The dataset folder if it is complete; else DataMissing with the command to run
    (the one that completes an interrupted generation, when that is what is there)."""
    started = None if (folder / MARKER).is_file() else _read(folder / PARTIAL)
    if started is not None:
        raise DataMissing(
            f"dataset {name} in {folder} is incomplete (its generation was interrupted): "
            f"complete it with `milarun dataset {name} --synthetic --size "
            f"{started.get('size')} --seed {started.get('seed')} -d {root}`"
        )
    if not (folder / MARKER).is_file():
        raise DataMissing(
            f"dataset {name} not found in {folder}: create it with "
            f"`milarun dataset {name} -d {root}` (real data) or "
            f"`milarun dataset {name} --synthetic -d {root}` (generated offline)"
        )
    return folder


def marker(folder: Path) -> dict[str, Any] | None:
    """The finished dataset's marker ({"synthetic", "size", "seed", ...}), None if absent."""
    return _read(folder / MARKER)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def summary(folder: Path, root: Path) -> dict[str, Any] | None:
    """The result's ``dataset`` for the finished data in ``folder``: {"name", "size" (training
    examples, in the dataset's unit), "synthetic"}; None if nothing finished is there."""
    info = marker(folder)
    if info is None:
        return None
    # The dataset whose folder this is (markers hold no name).
    name = next(
        (n for n in known() if Path(resolve(n).folder(root)) == Path(folder)), Path(folder).name
    )
    # ml20m counts its size in users; real data whose marker holds no count says so by null.
    size = info.get("size", info.get("users"))
    return {"name": name, "size": size, "synthetic": bool(info.get("synthetic"))}


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
    raise DataMissing(
        f"{folder} already holds {info.get('size')} synthetic examples; not "
        f"replacing them with {want} (remove that folder or use another "
        "--dataroot)"
    )


def synthesis(
    base: Path,
    name: str,
    size: int,
    seed: int,
    write: Callable[[], Any],
    unit: str = "example",
    max_size: int | None = None,
    params: dict[str, Any] | None = None,
) -> Path:
    """What every ``synthesize`` does around writing its files: check ``size``, keep
    finished data (see :func:`ready`), note what is being made (the partial marker: size,
    seed, ``params``), call ``write()``, then mark ``base`` complete with the same and the
    dict ``write`` returns (if any). An interrupted generation is completed by the same
    request (``write`` keeps the whole files already there) and refused to any other.
    Returns ``base``."""
    if size < 1 or (max_size is not None and size > max_size):
        need = f"1 to {max_size}" if max_size is not None else "at least 1"
        raise ValueError(f"{name}: size {size} (need {need} {unit}s)")
    request = {"synthetic": True, "size": size, "seed": seed, **(params or {})}
    if ready(base, True, size):  # finished data is never replaced
        (base / PARTIAL).unlink(missing_ok=True)  # left by a kill just after completion
        return base
    started = _read(base / PARTIAL)
    if started is not None and started != request:
        raise DataMissing(
            f"{base} holds an interrupted generation of {started.get('size')} synthetic "
            f"examples (seed {started.get('seed')}): complete it with --size "
            f"{started.get('size')} --seed {started.get('seed')}, or remove that folder"
        )
    write_new(base / PARTIAL, json.dumps(request).encode(), replace=True)
    info = write() or {}
    _remove_stale_temporaries(base)
    mark_complete(base, True, **{"size": size, "seed": seed, **(params or {}), **info})
    (base / PARTIAL).unlink(missing_ok=True)  # a twin generator may have finished first
    return base


def real_data(base: Path, write: Callable[[], Any]) -> Path:
    """What every ``download`` does around fetching: nothing when finished data is there
    (real data is never mixed with or written over synthetic data), then ``write()``, then
    the marker with the dict ``write`` returns (if any). Returns ``base``."""
    if ready(base, False):
        return base
    started = _read(base / PARTIAL)
    if started is not None:
        raise DataMissing(
            f"{base} holds an interrupted generation of {started.get('size')} synthetic "
            "examples: not mixing the real data with it (remove that folder, or complete it "
            f"with --synthetic --size {started.get('size')} --seed {started.get('seed')})"
        )
    mark_complete(base, False, **(write() or {}))
    return base


def mark_complete(folder: Path, synthetic: bool, **info: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_new(folder / MARKER, json.dumps({"synthetic": synthetic, **info}).encode(), replace=True)


def write_new(path: Path, data: bytes, replace: bool = False) -> bool:
    """Write a file atomically; an existing file is kept (False) unless ``replace``.

    Parallel generators never clobber each other's files: the content goes to a temporary
    file named after this host and process, then is hard-linked (or, with replace, renamed)
    into place; a killed writer leaves only that temporary file, never a truncated one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not replace:
        return False
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
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


def _remove_stale_temporaries(base: Path) -> None:
    """Delete the temporary files of writers that were killed (see :func:`write_new`): those
    of a dead process on this host, and any too old to have a live writer elsewhere."""
    host, now = socket.gethostname(), time.time()
    for tmp in base.rglob(".*.tmp"):
        pid = tmp.name[: -len(".tmp")].rpartition(".")[2]  # .<name>.<host>.<pid>.tmp
        try:
            stale = (
                tmp.name.endswith(f".{host}.{pid}.tmp") and not _alive(int(pid))
            ) or now - tmp.stat().st_mtime > STALE_TEMP_AGE
        except (ValueError, OSError):  # not one of ours, or already gone
            continue
        if stale:
            tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        pass
    return True


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
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as response, open(tmp, "wb") as out:
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
