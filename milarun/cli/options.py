"""Defaults and value parsing shared by the commands (milarun.cli.main and its slurm group)."""

from __future__ import annotations

import datetime as _dt
import logging
import os
import sys
from pathlib import Path


def default_dataroot() -> Path:
    if os.environ.get("MILARUN_DATAROOT"):
        return Path(os.environ["MILARUN_DATAROOT"])
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "milarun" / "data"


def default_outdir() -> Path:
    date = _dt.date.today().isoformat()
    if os.environ.get("MILARUN_OUTROOT"):
        return Path(os.environ["MILARUN_OUTROOT"]) / f"results-{date}"
    return Path("results") / date


def split_names(values: list[str]) -> list[str]:
    """Names given as several words, each possibly comma separated."""
    return [n for v in values for n in v.split(",") if n]


class _StderrHandler(logging.StreamHandler):
    """``milarun: warning: <message>`` on the sys.stderr of the moment: while the live
    table is up, rich swaps in a proxy that prints above the table."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)

    def format(self, record: logging.LogRecord) -> str:
        return f"milarun: {record.levelname.lower()}: {record.getMessage()}"


def setup_logging() -> None:
    """Send the ``milarun`` loggers' warnings to stderr, one plain line each (once)."""
    logger = logging.getLogger("milarun")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())
    logger.setLevel(logging.WARNING)
    logger.propagate = False  # a library's root handler would print them twice
