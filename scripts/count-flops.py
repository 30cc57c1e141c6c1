"""Regenerate milarun's counted FLOPs table (milarun/tender/flops-counted.json).

Each test of a profile that records counted FLOPs (``helpers.train``'s FlopCounterMode step,
milarun/measure/efficiency.py) is run here with ``milarun run`` at its profile's arguments,
twice, at two small batch sizes, on the CPU: the counted step's FLOPs per example must not
depend on the batch (it is checked on every entry, and an entry that does is left out), and
they do not depend on the device (FlopCounterMode counts shapes). The entry is keyed by the
recorded arguments that can change the count (milarun.tender.flops.shape_key).

Tests the table does not need: gemm, llm, llm-scaling, wlm, sine_wave, translator
(milarun's formulas: milarun.tender.flops, milarun.measure.flops_formulas), the RL tests and
loader (no FLOPs figure bounds them: milarun.tender.flops.UNBOUNDED says why). A test that fails
here is reported and left out; verify then says "not recomputed" for it.

    uv run python scripts/count-flops.py --profile modern --profile standard
    uv run python scripts/count-flops.py --profile standard --test vae --batch 2 --batch 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from milarun.tender import flops  # noqa: E402

PROFILES = ROOT / "milarun" / "profiles"
FORMULA_TESTS = (
    "milabench.models.gemm:main", *flops.LLAMA_TESTS, flops.WORD_LM, flops.SINE_WAVE,
    flops.TRANSLATOR,
)  # fmt: skip
UNBOUNDED_TESTS = tuple(flops.UNBOUNDED)  # the RL tests, loader
# run-length and loader arguments set small here: they change nothing the counter sees
SMALL = {"--workers": "1"}


def profile_tests(name: str) -> dict[str, tuple[str, dict[str, Any]]]:
    data = json.loads((PROFILES / f"{name}.json").read_text())
    common = data.get("*", {}).get("arguments", {})
    return {
        test: (entry["experiment"], {**common, **entry.get("arguments", {})})
        for test, entry in data.items()
        if test != "*" and isinstance(entry, dict) and "experiment" in entry
    }


def argv_for(arguments: dict[str, Any], batch: int) -> list[str]:
    given = {**arguments, **{k: v for k, v in SMALL.items() if k in arguments}}
    given["--min-slices"] = "1"
    if "--batch-size" in given:
        given["--batch-size"] = batch
    given["--max-count"] = 2 * batch
    argv: list[str] = []
    for key, value in given.items():
        if value is True:
            argv.append(key)
        elif value not in (False, None):
            argv += [key, str(value)]
    return argv


DATAROOT: str | None = None  # --dataroot: where the tests find their (synthetic) data sets


def count(function: str, argv: list[str], timeout: float) -> dict[str, Any] | str:
    """One real ``milarun run`` on the CPU: its result, or why there is none."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "MILARUN_COUNT_FLOPS": "1"}
        cmd = ["milarun", "run", function, "-o", str(out), "--", *argv]
        if DATAROOT:
            cmd[2:2] = ["-d", DATAROOT]
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"over {timeout:g} s"
        if not out.exists():  # a FAIL (too short a run) still records its counted step
            return f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-200:]}"
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def entry_for(test: str, function: str, arguments: dict[str, Any], batches: list[int],
              timeout: float) -> dict[str, Any] | str:  # fmt: skip
    figures, last = [], None
    for batch in batches:
        found = count(function, argv_for(arguments, batch), timeout)
        if isinstance(found, str):
            return found
        eff = found.get("efficiency") or {}
        if not isinstance(eff.get("flops_per_example"), (int, float)):
            failure = (found.get("failure") or {}).get("message")
            return f"no counted FLOPs: {eff.get('note') or failure}"[:300]
        figures.append(float(eff["flops_per_example"]))
        last = found
    assert last is not None
    if any(abs(f - figures[0]) > 1e-9 * figures[0] for f in figures):
        return f"FLOPs per example depend on the batch: {figures} at batches {batches}"
    import torch

    return {
        "test": test,
        "function": function,
        "arguments": flops.shape_key(last["call"]["arguments"]),
        "flops_per_example": figures[0],
        "counted": f"CPU, batches {', '.join(map(str, batches))}, torch {torch.__version__}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", action="append", default=[])
    parser.add_argument("--test", action="append", default=[], help="only these tests")
    parser.add_argument("--batch", action="append", type=int, default=[])
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--table", type=Path, default=flops.TABLE)
    parser.add_argument(
        "--dataroot", help="data folder (`milarun dataset NAME --synthetic -d DIR` first)"
    )
    opts = parser.parse_args()
    global DATAROOT
    DATAROOT = opts.dataroot
    batches = opts.batch or [1, 2]
    failed = 0
    for profile in opts.profile or ["modern", "standard"]:
        for test, (function, arguments) in profile_tests(profile).items():
            if function in FORMULA_TESTS + UNBOUNDED_TESTS or (opts.test and test not in opts.test):
                continue
            found = entry_for(test, function, arguments, batches, opts.timeout)
            if isinstance(found, str):
                print(f"{profile}.{test}: not counted: {found}", flush=True)
                failed += 1
                continue
            # read at each entry: another count may have written it meanwhile
            table = json.loads(opts.table.read_text()) if opts.table.exists() else {"entries": []}
            entries: list[dict[str, Any]] = table["entries"]
            entries[:] = [
                e
                for e in entries
                if (e["function"], e["arguments"]) != (found["function"], found["arguments"])
            ]
            entries.append(found)
            entries.sort(key=lambda e: (e["function"], json.dumps(e["arguments"])))
            written = opts.table.with_suffix(f".{os.getpid()}.tmp")
            written.write_text(json.dumps(table, indent=1) + "\n")
            written.replace(opts.table)  # a reader never sees half a table
            print(f"{profile}.{test}: {found['flops_per_example']:,.0f} FLOPs/example", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
