"""`milarun db ...` and `milarun history` (coleo): parse, call milarun.history, print."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coleo import Option, default, tooled

from milarun import errors
from milarun.cli.options import print_skipped

if TYPE_CHECKING:
    from milarun.history import trends

# Each command imports the history wing (SQLAlchemy) when it runs.

# Exit code of `db regressions --fail-on` when an alert of that kind is found (cron).
ALERTS_FOUND = 3
FAIL_ON = {"regression": ("Regression",), "suspicious": ("Regression", "Suspicious")}


def no_args(command: str, test_args: list[str]) -> None:
    if test_args:
        raise errors.UsageError(f"{command} takes no arguments after --")


def parse_since(text: str | None) -> float | None:
    """An ISO date or date-time (UTC unless it names its zone) as a POSIX time."""
    if text is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise errors.UsageError(
            f"--since {text[:60]!r}: give a date such as 2026-01-31 or 2026-01-31T08:00"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.timestamp()


def ingest_into(db: str | None, sources: list[Path], machine: str | None = None) -> None:
    """Ingest each folder (one run each) and print what was added."""
    from milarun.history import ingest, store

    engine = store.open_db(db)
    print(f"database: {store.shown(store.url_of(db))}", flush=True)
    try:
        for source in sources:
            run = ingest.read_run(source, machine)
            print_skipped(run.skipped)
            done = ingest.ingest(engine, run)
            print(
                f"{done.source}: run {done.run_id} on {done.machine}: {done.added} result(s) "
                f"added, {done.known} already there",
                flush=True,
            )
    finally:
        engine.dispose()


@tooled
def database_option() -> str | None:
    """The --db of `jobs` and `slurm fleet/wait`."""
    # Then ingest the run into this results database (a URL or an SQLite file)
    db: Option & str = default(None)

    return db


def ingest_after_run(db: str | None, outdir: Path) -> None:
    """The run just made, into the database ``db`` (None: none asked for)."""
    if db is not None:
        ingest_into(db, [outdir])


@tooled
def _judged(**overrides: Any) -> "trends.Options":  # noqa: UP037 (ptera evaluates it)
    """The options history and regressions share: how points are grouped and judged."""
    # Series of a test per machine (test), per node (node) or per GPU by UUID (gpu); default:
    # per GPU with --gpu, per node with --node, else per machine
    by: Option & str = default(None)
    # Relative change below which a point is no change, however significant
    threshold: Option & float = default(0.05)
    # Points in a test's baseline window
    window: Option & int = default(5)

    from milarun.history import trends

    return trends.Options(
        by=by or overrides.get("by") or "test", threshold=threshold, window=window
    )


@tooled
def _database() -> tuple[str | None, float | None]:
    # Database: an SQLAlchemy URL or an SQLite file (default: $MILARUN_DB, then
    # history.sqlite in the user's data folder)
    db: Option & str = default(None)
    # Only points from this date on (UTC), e.g. 2026-01-31
    since: Option & str = default(None)

    return db, parse_since(since)


def _series(filters: trends.Filters, options: trends.Options, db: str | None) -> Any:
    from milarun.history import store, trends

    engine = store.open_db(db, create=False)
    try:
        with store.session(engine) as session:
            return trends.history(session, filters, options)
    finally:
        engine.dispose()


def history(test_args: list[str]) -> int:
    """The history of a test (or every test): rates over time, CIs and verdicts."""
    # The test, e.g. quick.polynome (default: every test)
    # [positional: ?]
    test: Option = default(None)
    # Only this machine (its name in the database)
    machine: Option & str = default(None)
    # Only this node (series per node unless --by says otherwise)
    node: Option & str = default(None)
    # Only this GPU, by UUID (series per GPU)
    gpu: Option & str = default(None)
    # Also write the history as one self-contained HTML page
    html: Option = default(None)

    from milarun.history import trends
    from milarun.history.render import history_text

    no_args("history", test_args)
    db, since = _database()
    options = _judged(by="gpu" if gpu else "node" if node else None)
    filters = trends.Filters(test, machine, node, gpu, since)
    series = _series(filters, options, db)  # a name that matches nothing: UsageError
    print(history_text(series), end="")
    if not series:  # every name is known, but not together (or not --since): nothing shown
        return 1
    if html:
        from milarun.history.page import write_page

        written = write_page(Path(html), series, filters, options)
        print(f"HTML history: {written.resolve()}", file=sys.stderr)
    return 0


@tooled
def machines_report(source: list[str], weights: str | None) -> bool:
    """`report --db URL --machines A B C`: True when it printed that report."""
    # Machines side by side from the results database (--db): machine names (each one's
    # latest run) or run:ID
    # [nargs: +]
    machines: Option = default([])
    # The results database of --machines (default: $MILARUN_DB, then history.sqlite)
    db: Option & str = default(None)

    if not machines:
        if not source:
            raise errors.UsageError("report: give a results folder or summary file")
        return False
    if source:
        raise errors.UsageError("report --machines reads the database: give no results folder")
    from milarun.history import store
    from milarun.history.machines import side_by_side
    from milarun.history.render import machines_text

    engine = store.open_db(db, create=False)
    try:
        with store.session(engine) as session:
            found = side_by_side(session, machines, weights)
    finally:
        engine.dispose()
    print(machines_text(found), end="")
    return True


class DbCommands:
    """The results database: ingest runs, list regressions."""

    def ingest(test_args: list[str]) -> int:
        """Put results folders (each one run) in the database; what it holds is skipped."""
        # Results folders (a jobs -o, a slurm fleet -o) or result files
        # [positional: +]
        sources: Option
        # The machine's name (default: the node of a one-node run, <node>+N for a fleet)
        machine: Option & str = default(None)

        no_args("db ingest", test_args)
        db, _ = _database()
        ingest_into(db, [Path(s) for s in sources], machine)
        return 0

    def regressions(test_args: list[str]) -> int:
        """The alerts: points judged Regression (or Suspicious), most recent first."""
        # Exit with code 3 when an alert of this kind is found: regression, suspicious
        fail_on: Option & str = default(None)
        # Also list the Suspicious points
        suspicious: Option & bool = default(False)

        from milarun.history import trends
        from milarun.history.render import alerts_text

        no_args("db regressions", test_args)
        if fail_on is not None and fail_on not in FAIL_ON:
            raise errors.UsageError(f"--fail-on {fail_on}: use regression or suspicious")
        db, since = _database()
        options = _judged()
        series = _series(trends.Filters(since=since), options, db)
        shown = FAIL_ON["suspicious" if suspicious else "regression"]
        print(alerts_text(trends.alerts(series, shown)), end="")
        busy = trends.alerts(series, (trends.BUSY,))
        if busy:  # never an alert: the exit code is not theirs
            slower = sum(p.change is not None and p.change <= -options.threshold for p in busy)
            print(
                f"left out: {len(busy)} point(s) measured on a busy machine, {slower} of them "
                "slower than their history by the threshold: not judged (`milarun history`)"
            )
        failing = trends.alerts(series, FAIL_ON[fail_on]) if fail_on else []
        return ALERTS_FOUND if failing else 0
