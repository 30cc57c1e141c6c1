"""Defaults and value parsing shared by the commands (milarun.cli.main and its slurm group)."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coleo import Option

from milarun import errors

if TYPE_CHECKING:
    from milarun.results.folder import Skipped
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
    """Send the ``milarun`` loggers' warnings to stderr, one plain line each (once); then
    the environment's own warning, if any (warn_cpu_only)."""
    logger = logging.getLogger("milarun")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())
    logger.setLevel(logging.WARNING)
    logger.propagate = False  # a library's root handler would print them twice
    warn_cpu_only()  # milarun's first words: a CPU-only install whose torch was replaced


def warn_cpu_only() -> None:
    """A CPU-only environment (scripts/install-cpu.sh) whose torch a sync replaced: said at
    every command, never silent (milarun.machine.torchbuild)."""
    from milarun.machine import torchbuild

    problem = torchbuild.cpu_only_problem()
    if problem:
        print(f"milarun: warning: {problem}", file=sys.stderr)


MAX_SKIPPED_SHOWN = 20


REQUIRED = "(required)"  # an option whose help ends so is required (coleo has no such mark)


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad call in one line instead of the usage block; an option
    whose help ends with REQUIRED is required (its usage shows it without brackets)."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        if str(kwargs.get("help") or "").endswith(REQUIRED) and args[0].startswith("-"):
            kwargs["required"] = True
        return super().add_argument(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message} (see {self.prog} -h)", file=sys.stderr)
        sys.exit(2)


def parse_extra(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        extra = json.loads(text)
    except json.JSONDecodeError as err:
        raise errors.UsageError(
            f"--extra is not valid JSON ({err.msg} at column {err.colno})"
        ) from None
    if not isinstance(extra, dict):
        raise errors.UsageError("--extra must be a JSON object")
    return extra


def no_test_args(command: str, test_args: list[str]) -> None:
    if test_args:
        raise errors.UsageError(f"{command} takes no arguments after --")


def print_skipped(skipped: list[Skipped]) -> None:
    """Files that were not results: listed with the reason, never fatal."""
    if not skipped:
        return
    print(f"skipped {len(skipped)} file(s) that are not usable results:", file=sys.stderr)
    for item in skipped[:MAX_SKIPPED_SHOWN]:
        print(f"  {item.path}: {item.reason}", file=sys.stderr)
    if len(skipped) > MAX_SKIPPED_SHOWN:
        print(f"  ... and {len(skipped) - MAX_SKIPPED_SHOWN} more", file=sys.stderr)


@dataclass(frozen=True)
class Declared:
    """An option declared from data (a dataclass's field) rather than as a coleo variable."""

    dest: str  # the key its value has in the command's __options__
    flag: str
    kind: type  # bool: a switch
    help: str
    metavar: str


def declared_options(options: list[Declared]) -> Callable[[], None]:
    """A stand-in function whose variables coleo reads as these options: a command takes it
    with ``coleo.with_extras`` and finds their values, when given, in ``__options__`` (the
    parsed namespace). What coleo reads of a tooled function is its ``__ptera_info__``."""

    def options_of_data() -> None:
        """Options made from data (see declared_options)."""

    options_of_data.__ptera_info__ = {  # type: ignore[attr-defined]
        o.dest: {
            "name": o.dest,
            "annotation": Option & o.kind,
            "doc": f"{o.help}\n[options: {o.flag}]\n[metavar: {o.metavar}]",
            "location": None,
            "provenance": "body",
        }
        for o in options
    }
    return options_of_data
