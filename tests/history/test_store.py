"""The results database on SQLite and on a real PostgreSQL: schema, idempotent ingest, one
transaction per run, two ingests at once, a newer schema refused."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import func, select, text

from conftest import milarun, milarun_process, one_line_error
from milarun.cli.history import parse_since
from milarun.errors import DatabaseError, EmptyResults, InputError, UsageError
from milarun.history import ingest, store
from milarun.history.models import Base, Gpu, Machine, Node, Result, Run
from milarun.server import models as server_models  # noqa: F401 (its tables: in Base too)
from resultfactory import run_folder

T0 = 1_767_225_600.0  # 2026-01-01


def counts(url: str) -> dict[str, int]:
    engine = store.open_db(url)
    try:
        with store.session(engine) as session:
            return {
                model.__tablename__: session.scalar(select(func.count()).select_from(model)) or 0
                for model in (Machine, Run, Node, Gpu, Result)
            }
    finally:
        engine.dispose()


def test_ingest_twice_adds_each_result_once(db_url, tmp_path):
    folder = run_folder(tmp_path / "r1", {"quick.a": [100.0, 101.0], "quick.b": [math.nan]}, T0)
    first = milarun("db", "ingest", folder, "--db", db_url)
    assert first.returncode == 0, first.stderr
    assert "3 result(s) added, 0 already there" in first.stdout
    engine = store.open_db(db_url)
    again = ingest.ingest(engine, ingest.read_run(folder))
    engine.dispose()
    assert (again.added, again.known) == (0, 3)
    assert counts(db_url) == {"machines": 1, "runs": 1, "nodes": 1, "gpus": 0, "results": 3}
    engine = store.open_db(db_url)
    with store.session(engine) as session:
        rows = {(r.test, r.device): r for r in session.scalars(select(Result))}
    engine.dispose()
    good, failed = rows[("quick.a", "cpu:0")], rows[("quick.b", "cpu:0")]
    assert good.success and good.rate == pytest.approx(100.0)
    assert len(good.steady or []) == 18 and sum(good.steady or []) / 18 == pytest.approx(100.0)
    assert not failed.success and failed.rate is None and failed.steady is None
    assert failed.failure_kind == "crash" and failed.failure_message == "died"
    assert good.driver == "550.1"


def test_a_gpu_keeps_its_history_on_another_node(db_url, tmp_path):
    gpus = {"cuda:0": "GPU-aaaa", "cuda:1": "GPU-bbbb"}
    run_folder(tmp_path / "r1", {"quick.a": [100.0, 100.0]}, T0, node="n1", gpus=gpus)
    moved = {"cuda:0": "GPU-cccc", "cuda:1": "GPU-aaaa"}
    run_folder(tmp_path / "r2", {"quick.a": [100.0, 100.0]}, T0 + 1e4, node="n2", gpus=moved)
    engine = store.open_db(db_url)
    for name in ("r1", "r2"):
        ingest.ingest(engine, ingest.read_run(tmp_path / name, machine="lab"))
    with store.session(engine) as session:
        nodes = session.execute(
            select(Node.name).join(Result).join(Gpu).where(Gpu.uuid == "GPU-aaaa")
        ).scalars()
        assert sorted(nodes) == ["n1", "n2"]
        assert session.scalar(select(func.count()).select_from(Gpu)) == 3
    engine.dispose()


def test_a_failed_ingest_leaves_nothing_of_its_run(db_url, tmp_path):
    run = ingest.read_run(run_folder(tmp_path / "r1", {"quick.a": [1.0, 2.0, 3.0]}, T0))
    # the last row breaks a NOT NULL column: the whole run's transaction is rolled back
    run.rows[-1] = ingest.Row(**{**vars(run.rows[-1]), "job_id": None})  # type: ignore[arg-type]
    engine = store.open_db(db_url)
    with pytest.raises(DatabaseError, match="not ingested"):
        ingest.ingest(engine, run)
    engine.dispose()
    assert counts(db_url) == {"machines": 0, "runs": 0, "nodes": 0, "gpus": 0, "results": 0}


def test_two_ingests_at_once_store_each_result_once(db_url, tmp_path):
    folder = run_folder(tmp_path / "r1", {f"quick.t{i}": [float(i + 1)] * 4 for i in range(6)}, T0)
    both = [milarun_process("db", "ingest", folder, "--db", db_url) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in both]
    assert [p.returncode for p in both] == [0, 0], outputs
    added = sorted(int(out.split(" result(s) added")[0].rsplit(" ", 1)[1]) for out, _ in outputs)
    assert added in ([0, 24], [24, 0]) or sum(added) == 24
    assert counts(db_url)["results"] == 24 and counts(db_url)["runs"] == 1


def test_the_migrations_make_the_models_schema(db_url):
    from alembic.script import ScriptDirectory

    assert ScriptDirectory(str(store.MIGRATIONS)).get_heads() == [store.HEAD]
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    engine = store.open_db(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == []


def test_a_newer_schema_is_refused_in_one_line(db_url, tmp_path):
    engine = store.open_db(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(DatabaseError, match="revision 9999.*newer milarun") as refused:
        store.open_db(db_url)
    assert "\n" not in str(refused.value)


def test_bad_databases_and_inputs_are_one_line_errors(tmp_path):
    folder = run_folder(tmp_path / "r1", {"quick.a": [1.0]}, T0)
    with pytest.raises(DatabaseError, match="not a database URL"):
        store.open_db("nosuch://x")
    line = one_line_error(milarun("slurm", "fleet", "quick", "--db", "x", "--dry-run"))
    assert "add --wait" in line
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database " * 100)
    line = one_line_error(milarun("db", "ingest", folder, "--db", junk))
    assert "cannot open" in line and "junk.sqlite" in line
    assert junk.read_text().startswith("not a database")  # nothing written over it
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(EmptyResults, match="no milarun results"):
        ingest.read_run(empty)
    with pytest.raises(InputError, match="--machine .*printable characters"):
        ingest.read_run(folder, machine="a\nb")
    with pytest.raises(UsageError, match="--since 'May'"):
        parse_since("May")
    assert parse_since("2026-01-01") == T0


def test_an_older_database_is_migrated_with_its_results(db_url):
    """A database of revision 0001 (no steady sums) opened by this milarun: upgraded, each
    result's sums backfilled from its slices."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    engine = create_engine(db_url)
    with engine.begin() as conn:
        config = Config()
        config.set_main_option("script_location", str(store.MIGRATIONS))
        config.attributes["connection"] = conn
        command.upgrade(config, "0001")
        conn.execute(text("INSERT INTO machines (id, name) VALUES (1, 'm')"))
        conn.execute(
            text(
                "INSERT INTO runs (id, key, machine_id, profile_hash, started_at, stamp, source, "
                "ingested_at) VALUES (1, 'k', 1, 'h', 0, 's', '/r', 0)"
            )
        )
        conn.execute(text("INSERT INTO nodes (id, name) VALUES (1, 'n')"))
        conn.execute(
            text(
                "INSERT INTO results (id, content_hash, run_id, node_id, test, job_id, repeat, "
                "device, args_hash, finished_at, success, rate, steady) VALUES (1, 'c', 1, 1, "
                "'quick.a', '0', 0, 'cpu:0', 'a', 0, :yes, 2.0, '[1.0, 2.0, 3.0]')"
            ),
            {"yes": True},
        )
    engine.dispose()
    engine = store.open_db(db_url)
    with store.session(engine) as session:
        found = session.scalars(select(Result)).one()
        assert (found.steady_n, found.steady_sum, found.steady_squares) == (3, 6.0, 14.0)
    engine.dispose()


def test_a_folder_of_the_previous_format_ingests_as_its_files_hold_it(tmp_path):
    """The H100 run (format 1): each row hashed on the file as written (so a database that
    ingested it before the format had a version holds the same rows), its throttle record
    upgraded with the GPU's SM clock."""
    import json

    from conftest import DATA
    from milarun.results import bulk

    folder = DATA / "gpu-runs" / "h100-2026-11-28" / "modern"
    files = sorted(p for p in folder.glob("*.json") if bulk.is_result_file(p.name))
    assert files and all("format_version" not in json.loads(p.read_text()) for p in files)
    run = ingest.read_run(folder)
    assert sorted(r.content_hash for r in run.rows) == sorted(
        ingest.digest(json.loads(p.read_text())) for p in files
    )
    throttled = [r for r in run.rows if r.throttle]
    assert throttled and all(
        gpu.get("sm_clock_mhz") for r in throttled for gpu in r.throttle["gpus"].values()
    )
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    engine = store.open_db(url)
    try:
        first = ingest.ingest(engine, run)
        again = ingest.ingest(engine, ingest.read_run(folder))
    finally:
        engine.dispose()
    assert (first.added, again.added, again.known) == (len(files), 0, len(files))
