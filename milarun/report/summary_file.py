"""The summary (baseline) file: checked before any report computes with it, so that a bad
file is one line naming the file, the test and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from milarun import results
from milarun.errors import SummaryError
from milarun.report import energy

# Keys a summary entry must have for the report's math (the rest is informative).
REQUIRED_ENTRY_KEYS = ("n", "failures", "train")
REQUIRED_STATS_KEYS = ("n", "mean", "std")


def check_summary(data: Any, source: str) -> dict[str, dict[str, Any]]:
    """Validate the baseline format; the error names the file, the test and the key."""
    hint = "make one with `milarun summary RESULTS_DIR -o FILE`"
    if not isinstance(data, dict) or not data:
        raise SummaryError(f"{source}: not a summary file (expected an object of tests); {hint}")
    if "name" in data and "success" in data:
        raise SummaryError(
            f"{source}: is a single result file, not a summary; give its folder or {hint}"
        )
    for test, entry in data.items():
        if len(test) > results.MAX_NAME or not test.isprintable():  # as a result's name
            shown = repr(test[:60]) + (f"... ({len(test)} characters)" if len(test) > 60 else "")
            raise SummaryError(
                f"{source}: test {shown} is not a test name: one line of at most "
                f"{results.MAX_NAME} characters"
            )
        if not isinstance(entry, dict):
            raise SummaryError(f"{source}: test {test!r} is not an object; {hint}")
        for key in REQUIRED_ENTRY_KEYS:
            if key not in entry:
                raise SummaryError(f"{source}: test {test!r} has no key {key!r}; {hint}")
        train = entry["train"]
        if not isinstance(train, dict):
            raise SummaryError(f"{source}: test {test!r}: 'train' is not a stats object")
        for key in REQUIRED_STATS_KEYS:
            if key not in train:
                raise SummaryError(f"{source}: test {test!r} has no key 'train.{key}'; {hint}")
        problem = _entry_problem(entry)
        if problem:
            raise SummaryError(f"{source}: test {test!r}: {problem}; fix the file or {hint}")
    return data


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _bounded(value: Any) -> bool:
    return results.is_finite(value) and abs(value) <= results.MAX_RATE


def _stats_problem(where: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"'{where}' is not a stats object"
    if value.get("n") is not None and not _count(value["n"]):
        return f"'{where}.n' is {value['n']!r}, not a count"
    for key in ("min", "max", "mean", "std"):
        if value.get(key) is not None and not _bounded(value[key]):
            return (
                f"'{where}.{key}' is {value[key]!r}, not a number of at most {results.MAX_RATE:g}"
            )
    if value.get("std") is not None and value["std"] < 0:
        return f"'{where}.std' is negative"
    return None


def _entry_problem(entry: dict[str, Any]) -> str | None:
    """Type of every number a report computes with (counts, stats, rates)."""
    for key in ("n", "failures", "nodes", "interrupted"):
        if (key in ("n", "failures") or entry.get(key) is not None) and not _count(entry[key]):
            return f"'{key}' is {entry[key]!r}, not a count"
    if entry["failures"] > entry["n"]:
        return f"'failures' ({entry['failures']}) is more than 'n' ({entry['n']})"
    for key in ("train", "total", "throughput"):
        problem = _stats_problem(key, entry.get(key))
        if problem:
            return problem
    pergpu = entry.get("pergpu")
    if pergpu is not None and not isinstance(pergpu, dict):
        return "'pergpu' is not an object of device -> stats"
    for device, value in (pergpu or {}).items():
        problem = _stats_problem(f"pergpu.{device}", value)
        if problem:
            return problem
    rates = entry.get("rates")
    if rates is not None and not (isinstance(rates, list) and all(_bounded(r) for r in rates)):
        return f"'rates' is not a list of numbers of at most {results.MAX_RATE:g}"
    if entry.get("peak_memory") is not None and not results.is_finite(entry["peak_memory"]):
        return f"'peak_memory' is {entry['peak_memory']!r}, not a finite number"
    for key in ("dataset", "natural", "quality", "failure_kinds", "energy", "throttle", "tf32"):
        if entry.get(key) is not None and not isinstance(entry[key], dict):
            return f"'{key}' is not an object"
    if entry.get("nocache") is not None and not isinstance(entry["nocache"], bool):
        return "'nocache' is not true/false"
    return _quality_problem(entry.get("quality") or {}) or energy.entry_problem(entry)


def _quality_problem(quality: dict[str, Any]) -> str | None:
    """The quality block's numbers (the report tabulates and formats them)."""
    nested = {k: quality.get(k) for k in ("startup", "busy")}  # objects of numbers
    for key, block in nested.items():
        if block is not None and not isinstance(block, dict):
            return f"'quality.{key}' is not an object"
    flagged = quality.get("flagged")
    if flagged is not None and not (
        isinstance(flagged, dict) and all(_count(v) for v in flagged.values())
    ):
        return "'quality.flagged' is not an object of counts"
    numbers = [(f"quality.{k}", v) for k, v in quality.items() if k not in ("flagged", *nested)] + [
        (f"quality.{k}.{n}", v) for k, block in nested.items() for n, v in (block or {}).items()
    ]
    for where, value in numbers:
        if value is not None and not results.is_finite(value):
            return f"'{where}' is {value!r}, not a finite number"
    return None


def load_summary_file(path: Path) -> dict[str, dict[str, Any]]:
    return check_summary(results.read_json(path, SummaryError), str(path))
