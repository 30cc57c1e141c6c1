"""Live progress of running instances, read from their logs.

Each instance prints ``MILARUN_PROGRESS {json}`` lines (count, max_count, latest rate) at
most once a second; the board reads the new bytes of every log and prints one line per
running instance at a fixed interval, and with ``verbose`` streams the instances' output.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

PROGRESS_TAG = "MILARUN_PROGRESS"
SLICE_SECONDS = 0.5  # in-block seconds per slice (experiment.SLICE_DURATION, not imported:
#                     the supervisor never imports the measurement side)


@dataclass
class _Watch:
    offset: int = 0
    partial: str = ""
    latest: dict[str, Any] = field(default_factory=dict)


class ProgressBoard:
    def __init__(self, out: TextIO, interval: float = 10.0, verbose: bool = False):
        self.out = out
        self.interval = interval
        self.verbose = verbose
        self.watches: dict[Path, _Watch] = {}
        self.last_print = time.monotonic()

    def update(self, running: list[Any]) -> None:
        """Read new log output; print the board when the interval has passed."""
        for inst in running:
            self._read(inst)
        now = time.monotonic()
        if running and now - self.last_print >= self.interval:
            self.last_print = now
            for inst in running:
                print(self.line(inst, now), file=self.out, flush=True)

    def _read(self, inst: Any) -> None:
        watch = self.watches.setdefault(inst.log_path, _Watch())
        try:
            with open(inst.log_path, "rb") as f:
                f.seek(watch.offset)
                data = f.read()
        except OSError:
            return
        if not data:
            return
        watch.offset += len(data)
        text = watch.partial + data.decode("utf-8", "replace")
        *lines, watch.partial = text.split("\n")
        for line in lines:
            if line.startswith(PROGRESS_TAG):
                try:
                    watch.latest = json.loads(line[len(PROGRESS_TAG):])
                except json.JSONDecodeError:
                    pass
            elif self.verbose:
                print(f"[{inst.name} J{inst.job_id}] {line}", file=self.out, flush=True)

    def line(self, inst: Any, now: float) -> str:
        """``<test> <device>  <rate> ex/s  <slices>/<min> slices  <count>[/<max>]  ETA <s>``
        for one instance; the ETA is the later of the two conditions (count and slices)."""
        latest = self.watches.get(inst.log_path, _Watch()).latest
        elapsed = now - inst.started
        if not latest:
            return f"  ...    {inst.tag}  starting ({elapsed:.0f}s)"
        count, total, rate = latest.get("count"), latest.get("max_count"), latest.get("rate")
        slices, wanted = latest.get("slices"), latest.get("min_slices")
        waits = []
        if rate and total and count is not None:
            waits.append((total - count) / rate)
        if slices is not None and wanted:
            waits.append((wanted - slices) * SLICE_SECONDS)
        eta = f"  ETA {max(0.0, *waits):.0f}s" if waits else ""
        rate_text = f"{rate:,.1f} ex/s" if rate else "-"
        slice_text = f"  {slices}/{wanted} slices" if slices is not None and wanted else ""
        count_text = f"{count}/{total}" if total else f"{count}"
        return (f"  ...    {inst.tag}  {rate_text}{slice_text}  {count_text}"
                f"{eta}  ({elapsed:.0f}s)")
