"""NVIDIA DCGM's own diagnostic, where DCGM is installed: ``dcgmi diag -r 1`` (quick) or
``-r 2`` (full) with ``-j``, its JSON parsed into one line of `doctor --active`.

The JSON (DCGM 3 and 4) holds ``test_categories``, each with ``tests``, each with ``results``
per GPU: ``status`` Pass, Fail, Warn or Skip, and ``warnings`` [{``warning``, ``error_id``}]
or ``info``. A failed test is a FAIL, a warning a WARN; what dcgmi prints is bounded and
untrusted (a broken install prints anything).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

from milarun.doctor.check import FAIL, INFO, PASS, WARN, Check

RUN_LEVEL = {"quick": 1, "full": 2}
TIMEOUT = {"quick": 300, "full": 900}  # seconds; -r 2 takes about 2 minutes per node
MAX_OUTPUT = 4 * 2**20
STATUS = {"pass": PASS, "fail": FAIL, "warn": WARN, "skip": INFO}
SHOWN = 3  # failed tests named in the line


def _tests(data: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(test name, one GPU's result) for every result in DCGM's JSON."""
    if isinstance(data, dict):
        for category in data.get("test_categories") or []:
            for test in (category or {}).get("tests") or []:
                for result in (test or {}).get("results") or []:
                    if isinstance(result, dict):
                        yield str(test.get("name", "?")), result
        for value in data.values():
            if isinstance(value, dict):
                yield from _tests(value)


def _why(result: dict[str, Any]) -> str:
    warnings = result.get("warnings") or []
    said = [str(w.get("warning", w)) for w in warnings if isinstance(w, dict)]
    said += [str(w) for w in warnings if not isinstance(w, dict)]
    text = "; ".join(said) or str(result.get("info") or "")
    return " ".join(text.split())[:200]


def parse(text: str, level: str) -> Check:
    """The line for dcgmi's JSON output."""
    name = f"dcgm diag -r {RUN_LEVEL[level]}"
    try:
        data = json.loads(text)
    except ValueError:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        tail = lines[-1][:200] if lines else "no output"
        return Check(name, WARN, f"dcgmi gave no JSON: {tail}", "run `dcgmi diag -r 1` by hand")
    found = list(_tests(data))
    if not found:
        return Check(name, WARN, "dcgmi's JSON holds no test result", "run `dcgmi diag -r 1`")
    counts: dict[str, int] = {}
    bad: list[str] = []
    worst = PASS
    for test, result in found:
        status = STATUS.get(str(result.get("status", "")).lower(), WARN)
        counts[status] = counts.get(status, 0) + 1
        if status in (FAIL, WARN):
            gpu = result.get("gpu_id", result.get("gpu_ids", result.get("entity_id")))
            where = f" (GPU {gpu})" if gpu is not None else ""
            bad.append(f"{status} {test}{where}: {_why(result)}")
            worst = FAIL if FAIL in (status, worst) else WARN
    summary = ", ".join(f"{n} {s.lower()}" for s, n in counts.items())
    detail = f"{len(found)} results ({summary})"
    if bad:
        more = f" and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
        detail += "; " + "; ".join(bad[:SHOWN]) + more
    fix = "read `dcgmi diag -r 3 -v` and NVIDIA's DCGM error ids" if bad else None
    return Check(name, worst, detail, fix)


def diag(dcgmi: str | None, level: str) -> Check:
    """Run dcgmi's diagnostic (bounded in time and output) and judge it."""
    name = f"dcgm diag -r {RUN_LEVEL[level]}"
    if dcgmi is None:
        return Check(name, INFO, "skipped: DCGM is not installed (dcgmi not on the PATH)")
    try:
        done = subprocess.run(
            [dcgmi, "diag", "-r", str(RUN_LEVEL[level]), "-j"],
            capture_output=True,
            timeout=TIMEOUT[level],
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return Check(name, WARN, f"dcgmi did not finish in {TIMEOUT[level]} s", "run it by hand")
    except OSError as err:
        return Check(name, WARN, f"dcgmi could not start: {err.strerror}", "reinstall DCGM")
    text = done.stdout[:MAX_OUTPUT].decode(errors="replace")
    if not text.strip() and done.returncode:
        said = done.stderr[-500:].decode(errors="replace").strip().splitlines()
        return Check(
            name,
            WARN,
            f"dcgmi exited with {done.returncode}: {said[-1] if said else 'no output'}",
            "start DCGM's host engine (`sudo systemctl start nvidia-dcgm`)",
        )
    return parse(text, level)
