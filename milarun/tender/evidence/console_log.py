"""A result against its instance's console log: the figures the run printed as it measured.

`milarun jobs` sends each instance's output to ``logs/<name>.J<job id>.log`` (run.plan),
each launch of it starting with a ``$ `` line. While its rate log measures, the instance
prints a ``MILARUN_PROGRESS`` JSON line when a slice closes, at most once a second, and once
more when the log finishes (measure.runner.progress_printer): the examples counted, the
slices closed, the last slice's rate and the in-block time. It ends with
``<name> J<id>: <rate> examples/s`` and ``result: <path>``. Each DDP rank prints its own.

json writes a float as the shortest text that reads back to the same float, so a progress
line's rate is exactly a slice of the result, and its count and time place it among the
slices: count = warm-up examples + the examples of the slices closed + part of the next
slice's; in-block time = warm-up time + the closed slices' time + less than one slice.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from milarun.measure.runner import PROGRESS_TAG
from milarun.results.parts import number as read
from milarun.results.read import ResultView
from milarun.results.records import RateRecord

EXACT = 1e-9  # the same floats summed in another order agree far better than this
TIME = 1e-6  # in-block time against its slices (consistency.RELATIVE: the same sums)
SAID = 0.005  # the console's rate has two decimals: half a hundredth
PRINT_INTERVAL = 1.0  # seconds between progress lines (progress_printer's min_interval)
MAX_LINE = 2**16  # a longer line is no line of ours (the supervisor keeps no more either)
RESULT_PREFIX = "result: "


@dataclass(frozen=True)
class Progress:
    """One MILARUN_PROGRESS line: its line number and figures."""

    line: int
    timer: str
    count: float
    slices: int
    rate: float | None
    in_block: float
    finished: bool


@dataclass
class Section:
    """The part of a log one launch of the instance printed."""

    progress: list[Progress] = field(default_factory=list)
    said: list[tuple[int, str]] = field(default_factory=list)  # (line, "<rate>") said at the end
    results: list[str] = field(default_factory=list)  # the files its "result:" lines name


def _progress(line: int, text: str) -> Progress | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    timer, slices, said = data.get("timer"), data.get("slices"), data.get("rate")
    count, rate, in_block = read(data.get("count")), read(said), read(data.get("in_block"))
    if not (
        isinstance(timer, str)
        and count is not None
        and isinstance(slices, int)
        and slices >= 0
        and (said is None or rate is not None)
        and in_block is not None
    ):
        return None
    return Progress(line, timer, count, slices, rate, in_block, data.get("finished") is True)


def read_section(log: Path, result_file: str, summary: str) -> Section | None:
    """The last section of ``log`` whose ``result:`` line names ``result_file`` (None when
    none does); ``summary``: the start of the line that says the rate (``<name> J<id>: ``)."""
    said = re.compile(re.escape(summary) + r"([0-9][0-9,]*\.[0-9]{2}) examples/s")
    found, current, number, whole = None, Section(), 0, True
    with open(log, "rb") as f:
        while chunk := f.readline(MAX_LINE):
            number += whole  # a long line's pieces are one line, none of them ours
            ours, whole = whole and chunk.endswith(b"\n"), chunk.endswith(b"\n")
            if not ours:
                continue
            text = chunk.decode("utf-8", "replace").rstrip("\n")
            if text.startswith("$ "):
                current = Section()
            elif text.startswith(PROGRESS_TAG + " "):
                line = _progress(number, text[len(PROGRESS_TAG) + 1 :])
                if line is not None:
                    current.progress.append(line)
            elif match := said.fullmatch(text):
                current.said.append((number, match[1]))
            elif text.startswith(RESULT_PREFIX):
                current.results.append(Path(text[len(RESULT_PREFIX) :]).name)
                if current.results[-1] == result_file:
                    found = current
    return found


def _widths(record: RateRecord) -> list[float]:
    """Each slice's in-block seconds: the slice width, the last one its partial length."""
    widths = [record.slice] * len(record.rates)
    if record.last_slice is not None and widths:
        widths[-1] = record.last_slice
    return widths


def _n(value: float) -> str:
    return f"{value:,.10g}"


def _line_problem(line: Progress, key: str, record: RateRecord, log: str, file: str) -> str | None:
    """Why a progress line whose rate is slice ``line.slices`` of ``record`` cannot have been
    printed by the run that wrote ``record``, or None."""
    where = f"{log} line {line.line}"
    widths, rates, s = _widths(record), record.rates, line.slices
    count, in_block = record.count, record.in_block
    if count is None or in_block is None:
        return f"{file}: timings.{key} has no count or in-block time to check {where} against"
    if line.finished:
        if s != len(rates) or abs(line.count - count) > EXACT * max(count, 1.0):
            return (
                f"{file}: timings.{key}.count {_n(count)} in {len(rates)} slices but {where} "
                f"(its end) count {_n(line.count)} in {s} slices"
            )
        if abs(line.in_block - in_block) > TIME * max(in_block, 1.0):
            return (
                f"{file}: timings.{key}.in_block {_n(in_block)} s but {where} (its end) "
                f"{_n(line.in_block)} s"
            )
        return None
    made = [r * w for r, w in zip(rates, widths, strict=True)]
    before = math.fsum(made[:s])
    warmup = count - math.fsum(made)  # examples counted before the first slice
    low, high = line.count - before - (made[s] if s < len(made) else 0.0), line.count - before
    slack = EXACT * max(abs(line.count), abs(count), 1.0)
    if not low - slack <= warmup <= high + slack:
        return (
            f"{file}: timings.{key}.count {_n(count)} leaves {_n(warmup)} examples before its "
            f"slices but {where} count {_n(line.count)} at slice {s} leaves "
            f"{_n(low)} to {_n(high)}"
        )
    start = record.warmup_time + math.fsum(widths[:s])  # when slice s closed, in-block time
    room = widths[s] if s < len(widths) else 0.0
    slack = TIME * max(line.in_block, 1.0)
    if not start - slack <= line.in_block <= start + room + slack:
        return (
            f"{file}: timings.{key} closes slice {s} at {_n(start)} s of in-block time but "
            f"{where} in_block {_n(line.in_block)} s"
        )
    return None


def _candidates(records: dict[str, RateRecord], timer: str) -> list[tuple[str, RateRecord]]:
    """The rate records a line of ``timer`` may come from: its own and each rank's."""
    return [
        (key, r)
        for key, r in records.items()
        if key == timer or (key.startswith(f"{timer}_") and key[len(timer) + 1 :].isdigit())
    ]


def _mismatch(line: Progress, found: list[tuple[str, RateRecord]], log: str, file: str) -> str:
    where = f"{log} line {line.line}"
    if not found:
        return f"{where}: timer {line.timer[:40]!r}, of which {file} holds no rate record"
    key, record = found[0]
    if line.slices > len(record.rates):
        n = len(record.rates)
        return f"{file}: timings.{key} has {n} slices but {where} is at slice {line.slices}"
    value = record.rates[line.slices - 1]
    return (
        f"{file}: timings.{key}.rates[{line.slices - 1}] {_n(value)} but {where} rate "
        f"{_n(line.rate or 0.0)}"
    )


def log_problems(
    view: ResultView, records: dict[str, RateRecord], run: Path, path: Path
) -> list[str]:
    """Where the instance log of the result at ``path`` (below the run folder ``run``)
    disagrees with it: the first disagreement of each kind, with how many lines share it."""
    file = path.relative_to(run).as_posix()
    log_path = path.parent / "logs" / f"{view.name}.J{view.job_id}.log"
    log = log_path.relative_to(run).as_posix()
    if not log_path.is_file():
        return [f"{file}: no instance log {log} (the run's console output, which `jobs` keeps)"]
    section = read_section(log_path, path.name, f"{view.name} J{view.job_id}: ")
    if section is None:
        return [f"{log}: no 'result: {path.name}' line: the log is not this result's run's"]
    problems: list[str] = []
    last: dict[str, int] = {}  # per rate record, the last slice a line pinned
    for line in section.progress:
        if line.rate is None or line.slices == 0:
            continue  # the warm-up: no slice to compare yet
        found = _candidates(records, line.timer)
        slice_of = [
            (k, r)
            for k, r in found
            if line.slices <= len(r.rates)
            and abs(r.rates[line.slices - 1] - line.rate) <= EXACT * abs(line.rate)
        ]
        why = [_line_problem(line, k, r, log, file) for k, r in slice_of]
        if slice_of and None in why:
            for (key, _), problem in zip(slice_of, why, strict=True):
                if problem is None:
                    last[key] = max(last.get(key, 0), line.slices)
            continue
        problems.append(next((w for w in why if w), None) or _mismatch(line, found, log, file))
    if problems:  # one shown, with how many lines disagree: the rest says the same
        more = f" (and {len(problems) - 1} more line(s) of the log)" if len(problems) > 1 else ""
        return [problems[0] + more] + _said(view, section, log, file)
    return _coverage(records, last, log) + _said(view, section, log, file)


def _coverage(records: dict[str, RateRecord], last: dict[str, int], log: str) -> list[str]:
    """The log pins the slices up to its last progress line, printed less than a second of
    in-block time (a few slices) before the run's last slice: a run whose later slices no
    line pins was longer than its log says."""
    if not last:
        return [f"{log}: no MILARUN_PROGRESS line of the result's slices"]
    gaps = {key: len(records[key].rates) - s for key, s in last.items()}
    key = min(gaps, key=gaps.__getitem__)
    record = records[key]
    # slices closed within a print interval after the last line, the one open then and the
    # partial last slice
    allowed = math.ceil(PRINT_INTERVAL / record.slice) + 2
    if gaps[key] <= allowed:
        return []
    return [
        f"{log}: its last progress line is at slice {last[key]} of timings.{key}'s "
        f"{len(record.rates)}: the run prints one within {PRINT_INTERVAL:g} s of any slice"
    ]


def _said(view: ResultView, section: Section, log: str, file: str) -> list[str]:
    """The rate the instance said at its end (two decimals) against the result's."""
    rate = view.rate()
    if rate is None:
        return []
    values = [(n, float(text.replace(",", ""))) for n, text in section.said]
    if any(abs(v - rate) <= SAID + EXACT * rate for _, v in values):
        return []
    if not values:
        return [f"{log}: no '{view.name} J{view.job_id}: ... examples/s' line (the rate it said)"]
    n, value = values[-1]
    return [f"{file}: steady rate {rate:,.2f} but {log} line {n} says {value:,.2f} examples/s"]
