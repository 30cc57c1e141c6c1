"""Defaults and value parsing shared by the commands (milarun.cli.main and its slurm group)."""

from __future__ import annotations

import datetime as _dt
import os
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
