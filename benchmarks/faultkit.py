"""What the fault campaign's scenarios share (benchmarks/faults.py and its faults_<topic>.py):
the real `milarun` CLI in subprocesses, a profile, the processes a scenario left, its results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # fullfs and resultfactory, shared with the tests
ENV = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests' / 'benches'}{os.pathsep}{ROOT}"}
SLOW = {"experiment": "milabench.models.calibration:main", "arguments": {"--min-slices": 40}}


def milarun(
    *args: object, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "milarun", *map(str, args)],
        env={**ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start(*args: object, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "milarun", *map(str, args)],
        env={**ENV, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def profile(folder: Path, **jobs: dict) -> Path:
    path = folder / "p.json"
    path.write_text(json.dumps({"*": {"max_duration": 60}, **jobs}))
    return path


def leftovers(marker: str) -> list[psutil.Process]:
    """Processes still running whose command line names this scenario's folder."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def results_in(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in folder.glob("*.json")]


def clean(done: subprocess.CompletedProcess) -> bool:
    """No traceback of milarun's own (a failed test's log, quoted "  | " by the report, may
    hold the test's)."""
    own = [line for line in (done.stdout + done.stderr).splitlines() if not line.startswith("  |")]
    return not any("Traceback" in line for line in own)


def one_line(done: subprocess.CompletedProcess) -> bool:
    """A bad input's outcome: a non-zero exit, no traceback, one line on stderr."""
    return done.returncode != 0 and clean(done) and len(done.stderr.strip().splitlines()) == 1


Outcome = tuple[bool, int, str]  # survived, runs lost, what happened

# Result files a scenario wrote itself (hostile or hand-made input), not milarun's output.
PLANTED: set[Path] = set()


def plant(path: Path) -> Path:
    """Mark ``path`` as the scenario's own input: wrong_content() leaves it out."""
    PLANTED.add(path.resolve())
    return path


def wrong_content(folder: Path) -> list[str]:
    """Result files (``*.J*.json``) milarun saved under ``folder`` that its own reader
    refuses: torn or truncated JSON, a field of the wrong type, a success without a rate."""
    from milarun import results
    from milarun.results import read

    wrong = []
    for path in folder.rglob("*.J*.json"):
        if path.resolve() in PLANTED or not path.is_file():
            continue
        try:
            data = json.loads(path.read_bytes())
        except (ValueError, OSError) as err:
            wrong.append(f"{path.name}: {str(err)[:60]}")
            continue
        if not isinstance(data, dict) or "milarun_version" not in data:
            continue  # not a result milarun writes (a scenario's stray file)
        try:
            problem = results.result_problem(data)
        except (KeyError, TypeError) as err:
            problem = f"missing or bad field {err}"
        if (
            problem is None
            and data.get("success")
            and read.ResultView.from_dict(data).rate() is None
        ):
            problem = "success without a rate"
        if problem:
            wrong.append(f"{path.name}: {problem}")
    return wrong


def stragglers(marker: str, grace: float = 5.0) -> int:
    """Processes still naming ``marker`` ``grace`` seconds after a scenario ended (each
    killed, so that the next scenario starts clean)."""
    left = leftovers(marker)
    _, alive = psutil.wait_procs(left, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    return len(alive)


def wait_for(check: Callable[[], bool], seconds: float = 240) -> bool:
    """Whether ``check()`` came true within ``seconds`` (asked every 50 ms)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False
