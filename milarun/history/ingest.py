"""``db ingest``: a results folder into the database, once.

Each result is known by its content hash (sha256 of its JSON, keys sorted): ingesting a
folder again adds only the results it did not hold. A folder is one run (a fleet folder, all
its nodes); its identity is its jobs runs' manifests (host, start, pid), so results added to
the folder later join the same run. One transaction per run: a killed ingest leaves nothing
of that run; two ingests at once queue on SQLite's write lock, and on PostgreSQL the loser of
a race on a new row retries and finds the winner's.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Engine, exc, insert, select
from sqlalchemy.orm import Session

from milarun import results
from milarun.errors import DatabaseError, EmptyResults, InputError
from milarun.history import lockholder, store
from milarun.history.models import INFERENCE_FIGURES, Gpu, Machine, Node, Result, Run
from milarun.report import variants
from milarun.results import manifest, read, throttle, upgrade
from milarun.results.folder import Skipped, load_dir
from milarun.results.records import Energy, NodeEnergy
from milarun.results.run_manifest import RunManifest

RETRIES = 5  # a PostgreSQL race on a new row: the transaction is retried this often
CHUNK = 500  # content hashes per IN (...) query
MAX_MACHINE = 255  # characters of a machine's name (the column's size)


def digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True)
class Row:
    """One result as the results table keeps it."""

    content_hash: str
    test: str
    job_id: str
    repeat: int
    device: str
    node: str
    gpu_uuid: str | None
    gpu_bus: str | None
    args_hash: str
    finished_at: float
    success: bool
    rate: float | None
    steady: list[float] | None
    steady_n: int | None
    steady_sum: float | None
    steady_squares: float | None
    failure_kind: str | None
    failure_message: str | None
    driver: str | None
    flags: list[str] | None
    throttle: dict[str, Any] | None
    energy: dict[str, Any] | None
    diagnostics: dict[str, Any] | None
    inference: str | None = None  # an inference test's comparison key in words
    output_tokens_per_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    goodput_percent: float | None = None


def _inference(view: read.ResultView, rate: float | None) -> dict[str, Any]:
    """An inference test's columns: its key in words (like with like, as the report's), its
    output tokens/s (its rate: one example is one output token) and latency figures."""
    served = view.inference
    if served is None:
        return {}
    figures = {k: served.figures.get(k) for k in INFERENCE_FIGURES}
    if figures["tpot_p50_ms"] is None:  # llm-decode: its headline batch's step time (as the report)
        figures["tpot_p50_ms"] = served.figures.get("tpot_ms")
    return {"inference": served.describe()[:255], "output_tokens_per_s": rate, **figures}


def _gpu(view: read.ResultView) -> tuple[str | None, str | None]:
    """(UUID, PCI bus id) of a single-GPU result; (None, None) for CPU or several GPUs."""
    found = view.gpu_identity
    if len(found) != 1:
        return None, None
    uuid, bus = found[0].uuid, found[0].pci_bus_id
    return (
        uuid[:255] if isinstance(uuid, str) and uuid else None,
        bus[:64] if isinstance(bus, str) else None,
    )


def _energy(gpu: Energy | None, node: NodeEnergy | None) -> dict[str, Any] | None:
    """The energy column: the GPUs' record, with the node's (its BMC) under ``bmc`` where it
    has a figure (no schema change: one JSON column holds both)."""
    found = gpu.to_dict() if gpu is not None and gpu.joules else {}
    if node is not None and results.is_finite(node.examples_per_joule):
        found["bmc"] = node.to_dict()
    return found or None


def _text(value: Any, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def row_of(view: read.ResultView, when: float) -> Row:
    """The row of a loaded result (results.load_result checked it); ``when``: its time
    when the result does not record it (an older file: its file name's stamp)."""
    rate = view.rate()
    steady = (
        [s for series in view.all_series() for s in series.steady_slices]
        if rate is not None
        else None
    )
    setup = {k: v for k, v in variants.setup(view).items() if k != "milarun"}
    failure, energy, train = view.failure, view.energy, view.diagnostics()
    finished, repeat = view.finished_at, view.repeat
    uuid, bus = _gpu(view)
    return Row(
        content_hash=digest(upgrade.as_written(view.data)),
        test=view.name,
        job_id=view.job_id,
        repeat=repeat if isinstance(repeat, int) and not isinstance(repeat, bool) else 0,
        device=view.device,
        node=view.node,
        gpu_uuid=uuid,
        gpu_bus=bus,
        args_hash=digest(setup),
        finished_at=float(finished)
        if isinstance(finished, (int, float)) and math.isfinite(finished)
        else when,
        success=rate is not None,
        rate=rate,
        steady=steady,
        steady_n=len(steady) if steady else None,
        steady_sum=math.fsum(steady) if steady else None,
        steady_squares=math.fsum(v * v for v in steady) if steady else None,
        failure_kind=None if rate is not None else view.failure_kind[:64],
        failure_message=_text((failure.message if failure else None) or view.error, 4096)
        if rate is None
        else None,
        driver=_text(view.system.get("driver"), 64),
        flags=throttle.flags(train) or None,
        throttle=dict(train.throttle or {}) or None,
        energy=_energy(energy, view.node_energy),
        diagnostics=train.to_dict() if train != read.NO_DIAGNOSTICS else None,
        **_inference(view, rate),
    )


@dataclass
class RunInput:
    """A run ready to ingest: where it came from, its machine and its results' rows."""

    source: str
    machine: str
    system: dict[str, Any] | None
    manifests: list[RunManifest]
    rows: list[Row]
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def started_at(self) -> float:
        starts = [float(m.started_at) for m in self.manifests]
        return min(starts or [r.finished_at for r in self.rows])

    @property
    def key(self) -> str:
        """Its jobs runs (host, start, pid), else (no manifest) its results."""
        if self.manifests:
            return digest(sorted([str(m.host), m.started_at, m.pid] for m in self.manifests))
        return digest(sorted(r.content_hash for r in self.rows))

    @property
    def profile_hash(self) -> str:
        """Every test's like-with-like setup: two runs of one profile share it."""
        return digest(sorted({(r.test, r.args_hash) for r in self.rows}))


def _stamp_time(path: Path) -> float | None:
    parsed = results.parse_filename(path.name)
    if parsed is None:
        return None
    import datetime as dt

    moment = dt.datetime.strptime(parsed["stamp"], "%Y%m%d-%H%M%S-%f")
    return moment.replace(tzinfo=dt.timezone.utc).timestamp()


def read_run(path: Path, machine: str | None = None) -> RunInput:
    """The results below a folder (or one result file) as a run; EmptyResults when none."""
    if machine is not None and not (0 < len(machine) <= MAX_MACHINE and machine.isprintable()):
        raise InputError(
            f"--machine {machine[:60]!r}: give a name of 1 to {MAX_MACHINE} printable characters"
        )
    path = Path(path)
    if path.is_dir():
        loaded = load_dir(path, seal=False)
        found, paths, skipped = loaded.results, loaded.paths, loaded.skipped
        folder = path
    elif path.is_file():
        data = results.load_result(path)
        problem = results.result_problem(data)
        if problem:
            raise InputError(f"{path}: {problem}")
        found, paths, skipped, folder = [read.ResultView.from_dict(data)], [path], [], path.parent
    else:
        raise InputError(f"{path}: no such file or folder")
    if not found:
        raise EmptyResults(f"{path}: no milarun results found; nothing to ingest")
    now = time.time()
    rows = [row_of(d, _stamp_time(p) or now) for d, p in zip(found, paths, strict=True)]
    system = found[0].system
    return RunInput(
        source=str(path.resolve()),
        machine=machine or default_machine(rows),
        system=system if isinstance(system, dict) else None,
        manifests=[m for _, m in manifest.run_manifests(folder, recursive=path.is_dir())],
        rows=rows,
        skipped=skipped,
    )


def default_machine(rows: Sequence[Row]) -> str:
    """The node of a one-node run; ``<first node>+<others>`` for a fleet."""
    nodes = sorted({r.node for r in rows})
    return nodes[0] if len(nodes) == 1 else f"{nodes[0]}+{len(nodes) - 1}"


@dataclass(frozen=True)
class Ingested:
    source: str
    run_id: int
    machine: str
    added: int
    known: int  # already in the database: not added again


def _ids(
    session: Session, model: Any, column: Any, names: Iterable[str], **extra: dict[str, Any]
) -> dict[str, int]:
    """name -> id of each (node name, GPU UUID), the missing ones inserted (with ``extra``
    columns: column -> {name: value})."""
    wanted = sorted(set(names))
    found: dict[str, int] = {}
    for start in range(0, len(wanted), CHUNK):
        part = wanted[start : start + CHUNK]
        found.update(session.execute(select(column, model.id).where(column.in_(part))).all())
    missing = [n for n in wanted if n not in found]
    if missing:
        session.execute(
            insert(model),
            [{column.key: n, **{k: v.get(n) for k, v in extra.items()}} for n in missing],
        )
        return _ids(session, model, column, wanted)
    return found


def _known(session: Session, hashes: list[str]) -> set[str]:
    known: set[str] = set()
    for start in range(0, len(hashes), CHUNK):
        part = hashes[start : start + CHUNK]
        known.update(
            session.scalars(select(Result.content_hash).where(Result.content_hash.in_(part)))
        )
    return known


def _write(session: Session, run: RunInput) -> Ingested:
    machine = session.scalar(select(Machine).where(Machine.name == run.machine))
    if machine is None:
        machine = Machine(name=run.machine, system=run.system)
        session.add(machine)
        session.flush()
    elif run.system is not None:
        machine.system = run.system
    db_run = session.scalar(select(Run).where(Run.key == run.key))
    if db_run is None:
        suites = Counter(r.test.split(".")[0] for r in run.rows)
        started = run.started_at
        db_run = Run(
            key=run.key,
            machine_id=machine.id,
            suite=suites.most_common(1)[0][0][:255],
            profile=_text(next((m.profile for m in run.manifests), None), 1024),
            profile_hash=run.profile_hash,
            started_at=started,
            stamp=results.utc_stamp(started),
            source=run.source[:4096],
            manifest=[m.to_dict() for m in run.manifests] or None,
            ingested_at=time.time(),
        )
        session.add(db_run)
        session.flush()
    rows = list({r.content_hash: r for r in run.rows}.values())
    known = _known(session, [r.content_hash for r in rows])
    new = [r for r in rows if r.content_hash not in known]
    nodes = _ids(session, Node, Node.name, (r.node for r in new))
    buses = {r.gpu_uuid: r.gpu_bus for r in new if r.gpu_uuid}
    gpus = _ids(session, Gpu, Gpu.uuid, buses, pci_bus_id=buses)
    if new:
        session.execute(
            insert(Result),
            [
                {
                    **{
                        k: v for k, v in vars(r).items() if k not in ("node", "gpu_uuid", "gpu_bus")
                    },
                    "run_id": db_run.id,
                    "node_id": nodes[r.node],
                    "gpu_id": gpus[r.gpu_uuid] if r.gpu_uuid else None,
                }
                for r in new
            ],
        )
    return Ingested(run.source, db_run.id, run.machine, len(new), len(rows) - len(new))


def ingest(engine: Engine, run: RunInput) -> Ingested:
    """Write ``run`` in one transaction; retried when another ingest won a race."""
    for attempt in range(RETRIES):
        try:
            with Session(store.writer(engine)) as session, session.begin():
                return _write(session, run)
        except exc.IntegrityError as err:
            if attempt == RETRIES - 1:
                raise DatabaseError(f"{run.source}: not ingested ({store.one_line(err)})") from None
        except exc.SQLAlchemyError as err:
            said = store.one_line(err)
            said += lockholder.explain(engine, said, store.BUSY_MS / 1000)
            raise DatabaseError(f"{run.source}: not ingested ({said})") from None
    raise AssertionError("unreachable")
