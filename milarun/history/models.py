"""The results database's tables (SQLAlchemy 2 typed ORM models).

A run (one ``milarun jobs`` or ``slurm fleet`` folder) was made on a machine (a name and
its system record); its results each ran on a node and, where there was one, a GPU known by
its NVML UUID, so a GPU moved to another node keeps its history. A result keeps what the
trends need (its steady rate and the steady window's slices, the arguments' hash for like
with like) and what an alert names (failure, energy, diagnostics, throttling, the driver).
The schema is Alembic's to change: milarun/history/migrations/versions.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

HASH = 64  # a sha256 in hex
# An inference test's latency and goodput columns of a result (ms, %; revision 0005)
INFERENCE_FIGURES = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "goodput_percent")


class Base(DeclarativeBase):
    pass


class Machine(Base):
    __tablename__ = "machines"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    system: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # its latest run's record


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(HASH), unique=True)  # the run's identity
    machine_id: Mapped[int] = mapped_column(ForeignKey("machines.id"), index=True)
    suite: Mapped[str | None] = mapped_column(String(255))
    profile: Mapped[str | None] = mapped_column(String(1024))
    profile_hash: Mapped[str] = mapped_column(String(HASH))  # every test's call, hashed
    started_at: Mapped[float] = mapped_column(Float, index=True)
    stamp: Mapped[str] = mapped_column(String(32))  # UTC, as in result file names
    source: Mapped[str] = mapped_column(String(4096))  # the folder it was ingested from
    manifest: Mapped[list[Any] | None] = mapped_column(JSON)  # its jobs runs' manifests
    ingested_at: Mapped[float] = mapped_column(Float)

    machine: Mapped[Machine] = relationship()


class Node(Base):
    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)


class Gpu(Base):
    __tablename__ = "gpus"

    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(String(255), unique=True)
    pci_bus_id: Mapped[str | None] = mapped_column(String(64))


class Result(Base):
    """One instance of a test and its result."""

    __tablename__ = "results"
    __table_args__ = (Index("ix_results_test_finished", "test", "finished_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(HASH), unique=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"), index=True)
    gpu_id: Mapped[int | None] = mapped_column(ForeignKey("gpus.id"), index=True)
    test: Mapped[str] = mapped_column(String(255))
    job_id: Mapped[str] = mapped_column(String(255))
    repeat: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(255))
    args_hash: Mapped[str] = mapped_column(String(HASH))  # its call but the harness flags
    finished_at: Mapped[float] = mapped_column(Float)
    success: Mapped[bool] = mapped_column(Boolean)
    rate: Mapped[float | None] = mapped_column(Float)  # steady examples/s; None: failed
    steady: Mapped[list[float] | None] = mapped_column(JSON)  # the steady window's slices
    # ... as the trends pool them: their count, sum and sum of squares (revision 0002)
    steady_n: Mapped[int | None] = mapped_column(Integer)
    steady_sum: Mapped[float | None] = mapped_column(Float)
    steady_squares: Mapped[float | None] = mapped_column(Float)
    failure_kind: Mapped[str | None] = mapped_column(String(64))
    failure_message: Mapped[str | None] = mapped_column(Text)
    driver: Mapped[str | None] = mapped_column(String(64))
    flags: Mapped[list[str] | None] = mapped_column(JSON)  # the steady window's diagnostics
    throttle: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    energy: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    diagnostics: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # An inference test (revision 0005): its comparison key in words (a series of its own)
    # and its figures; the rate above is its output tokens/s too. None for a training test.
    inference: Mapped[str | None] = mapped_column(String(255))
    output_tokens_per_s: Mapped[float | None] = mapped_column(Float)
    ttft_p50_ms: Mapped[float | None] = mapped_column(Float)
    ttft_p99_ms: Mapped[float | None] = mapped_column(Float)
    tpot_p50_ms: Mapped[float | None] = mapped_column(Float)
    tpot_p99_ms: Mapped[float | None] = mapped_column(Float)
    goodput_percent: Mapped[float | None] = mapped_column(Float)

    run: Mapped[Run] = relationship()
    node: Mapped[Node] = relationship()
    gpu: Mapped[Gpu | None] = relationship()


class FingerprintReference(Base):
    """The silent-data-corruption fingerprint a device model gives on a software stack
    (milarun.doctor.active.fingerprint), kept from the first clean `doctor --active` run."""

    __tablename__ = "fingerprint_references"

    id: Mapped[int] = mapped_column(primary_key=True)
    stack: Mapped[str] = mapped_column(String(512), unique=True)  # model | versions | v
    fingerprint: Mapped[str] = mapped_column(String(HASH))
    made_at: Mapped[float] = mapped_column(Float)
    made_on: Mapped[str] = mapped_column(String(255))  # the host and device that made it
