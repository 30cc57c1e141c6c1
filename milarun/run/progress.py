"""What ``milarun jobs`` shows while it runs: progress read from the instances' logs.

Each instance prints ``MILARUN_PROGRESS {json}`` lines (count, max_count, slices, latest
rate) at most once a second; the board reads the new bytes of every log. On a terminal it
keeps one in-place row per running instance (a rich live table) with the start and finished
lines printed above it; elsewhere (CI logs, pipes) it prints one plain line per running
instance at a fixed interval. With ``verbose`` it also streams the instances' output.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from milarun.measure.runner import PROGRESS_TAG
from milarun.results import read

SLICE_SECONDS = 0.5  # in-block seconds per slice (ratelog.SLICE_DURATION, not imported:
#                     the supervisor never imports the measurement side)
LIVE_REFRESH = 0.5  # seconds between redraws of the live table (progress comes at most 1/s)
# An instance's log is read 1 MiB at a time at most, and a partial line kept up to 64 KiB:
# a test printing without end (or a 900 MB line) must not grow the supervisor.
MAX_READ, MAX_LINE = 2**20, 2**16
COLUMNS = ("test", "device", "rate", "slices", "count", "ETA", "time", "state")


@dataclass
class _Watch:
    offset: int = 0
    partial: str = ""
    latest: dict[str, Any] = field(default_factory=dict)


@dataclass
class Progress:
    """One instance's progress as text, shared by the live row and the plain line."""

    rate: str = "-"
    slices: str = ""  # "<slices>/<min-slices>", empty when the run has no slice rule
    count: str = ""  # "<count>" or "<count>/<max>", empty before the first progress line
    eta: str = ""  # "<s>s", empty when nothing bounds the run
    elapsed: str = ""
    state: str = "starting"


def finished_line(inst: Any) -> str:
    """The permanent line of an ended instance: ``done ... examples/s`` or ``FAIL ...``."""
    view = read.ResultView.from_dict(inst.result)
    if view.success:
        rate = view.rate()
        rate_text = f"{rate:,.2f}" if rate is not None else "n/a"  # e.g. a NaN metric
        return f"done   {inst.tag}  {rate_text} examples/s"
    fail = view.failure
    return f"FAIL   {inst.tag}  {fail.kind if fail else None}: {fail.message if fail else None}"


def _state(inst: Any, latest: dict[str, Any], waits: list[float]) -> str:
    if getattr(inst, "alarm_sent", None) is not None or getattr(inst, "interrupted", False):
        return "stopping"  # past max_duration, or Ctrl-C
    if not latest:
        return "starting"
    if latest.get("finished"):
        return "after its window"  # measured; the test goes on (a sweep, a FLOP count)
    if not latest.get("rate"):
        return "warmup"  # no slice measured yet
    return "finishing" if waits and max(waits) <= 0 else "measuring"


def _amount(value: Any) -> str:
    """A count as a person reads it: a whole number with separators (a count in a unit,
    gemm's TFLOP, 6755.399441055731, reads 6,755); one under 10 that is not whole keeps
    three digits (2.47), so that a small count still moves."""
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 10 and not float(value).is_integer() else f"{value:,.0f}"


def parse_progress(text: str) -> dict[str, Any] | None:
    """A progress line's fields, or None: a test prints these lines, so a malformed one, a
    wrong type or a non-finite number must never reach the supervisor's arithmetic."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    clean: dict[str, Any] = {}
    for key in ("count", "max_count", "slices", "min_slices", "rate", "in_block"):
        value = data.get(key)
        ok = (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value >= 0
        )
        clean[key] = value if ok else None
    clean["finished"] = data.get("finished") is True
    return clean


class ProgressBoard:
    """Everything ``jobs`` prints while instances run: start/finished lines and progress."""

    def __init__(self, out: TextIO, interval: float = 10.0, verbose: bool = False) -> None:
        self.out = out
        self.interval = interval
        self.verbose = verbose
        self.watches: dict[Path, _Watch] = {}
        self.last_print = time.monotonic()
        # rich decides what a terminal is (isatty, TERM=dumb, FORCE_TERMINAL, ...)
        console = Console(file=out, markup=False, emoji=False, highlight=False, soft_wrap=True)
        self.console = console if console.is_terminal and not console.is_dumb_terminal else None
        self.live: Live | None = None
        self.last_draw = float("-inf")

    def say(self, text: str) -> None:
        """A permanent line: above the live table on a terminal, plain otherwise."""
        if self.console is None:
            print(text, file=self.out, flush=True)
        else:
            self.console.print(text)

    def finished(self, inst: Any) -> None:
        """The Supervisor's ``on_end`` callback: print the instance's finished line."""
        self.say(finished_line(inst))

    def update(self, running: list[Any]) -> None:
        """Read new log output; redraw the live table, or print plain lines when the
        interval has passed. An empty ``running`` ends the live table."""
        self.read(running)
        now = time.monotonic()
        if self.console is not None:
            self._draw(running, now)
        elif running and now - self.last_print >= self.interval:
            self.last_print = now
            for inst in running:
                print(self.line(inst, now), file=self.out, flush=True)

    def close(self) -> None:
        """Take the live table off the screen (its rows are transient)."""
        if self.live is not None:
            self.live.stop()
            self.live = None

    def _draw(self, running: list[Any], now: float) -> None:
        if not running:
            self.close()
            return
        if self.live is None:
            # transient: the rows vanish when the group ends, the start/done lines stay;
            # print() and logging (sys.stdout/stderr) go above the table meanwhile
            self.live = Live(console=self.console, auto_refresh=False, transient=True)
            self.live.start()
        if now - self.last_draw >= LIVE_REFRESH:
            self.last_draw = now
            self.live.update(self.table(running, now), refresh=True)

    def read(self, instances: list[Any]) -> None:
        """Take in new log output only (e.g. an ended instance's last lines)."""
        for inst in instances:
            self._read(inst)

    def _read(self, inst: Any) -> None:
        watch = self.watches.setdefault(inst.log_path, _Watch())
        try:
            with open(inst.log_path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size - watch.offset > MAX_READ:  # a runaway log: only its end matters
                    watch.offset, watch.partial = size - MAX_READ, ""
                f.seek(watch.offset)
                data = f.read(MAX_READ)
        except OSError:
            return
        if not data:
            return
        watch.offset += len(data)
        text = watch.partial + data.decode("utf-8", "replace")
        *lines, watch.partial = text.split("\n")
        if len(watch.partial) > MAX_LINE:  # no progress line is that long: let it go
            watch.partial = ""
        for line in lines:
            if line.startswith(PROGRESS_TAG):
                watch.latest = parse_progress(line[len(PROGRESS_TAG) :]) or watch.latest
            elif self.verbose:
                self.say(f"[{inst.name} J{inst.job_id}] {line}")

    def progress(self, inst: Any, now: float) -> Progress:
        """The instance's latest progress; the ETA is the later of the two conditions
        (count and slices)."""
        latest = self.watches.get(inst.log_path, _Watch()).latest
        shown = Progress(elapsed=f"{now - inst.started:.0f}s")
        count, total, rate = latest.get("count"), latest.get("max_count"), latest.get("rate")
        slices, wanted = latest.get("slices"), latest.get("min_slices")
        waits = []
        if rate and total and count is not None:
            waits.append((total - count) / rate)
        if slices is not None and wanted:
            waits.append((wanted - slices) * SLICE_SECONDS)
        shown.state = _state(inst, latest, waits)
        if not latest:
            return shown
        shown.eta = f"{max(0.0, *waits):.0f}s" if waits else ""
        shown.rate = f"{rate:,.1f} ex/s" if rate else "-"
        shown.slices = f"{slices}/{wanted}" if slices is not None and wanted else ""
        shown.count = f"{_amount(count)}/{_amount(total)}" if total else _amount(count)
        return shown

    def line(self, inst: Any, now: float) -> str:
        """``<tag>  <rate> ex/s  <slices>/<min> slices  <count>[/<max>]  ETA <s>  (<time>)``"""
        shown = self.progress(inst, now)
        if not shown.count:  # no progress line yet
            return f"  ...    {inst.tag}  starting ({shown.elapsed})"
        slices = f"  {shown.slices} slices" if shown.slices else ""
        if shown.state == "after its window":
            return (
                f"  ...    {inst.tag}  window measured{slices}, the test goes on  ({shown.elapsed})"
            )
        eta = f"  ETA {shown.eta}" if shown.eta else ""
        return f"  ...    {inst.tag}  {shown.rate}{slices}  {shown.count}{eta}  ({shown.elapsed})"

    def table(self, running: list[Any], now: float) -> Table:
        """One row per running instance, for the live display."""
        table = Table(*COLUMNS, box=None, pad_edge=False, header_style="bold")
        for column in table.columns[2:7]:
            column.justify = "right"
        for inst in running:
            shown = self.progress(inst, now)
            table.add_row(
                inst.name,
                ",".join(d.label for d in inst.devices),
                shown.rate,
                shown.slices,
                shown.count,
                shown.eta,
                shown.elapsed,
                shown.state,
            )
        return table
