"""SIGTERM and SIGHUP to `doctor --active` and to `jobs --doctor` while a probe measures
(issue 50): one line, exit 128 + the signal, no probe left running, no
``milarun-doctor-*`` folder left in the temp folder, no record and no job run. The real CLI
and its real probe on one CPU slice; the signal as soon as the probe runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, cli_env

pytestmark = pytest.mark.slow  # a real probe starts (torch imported) before the signal
PROBE = "milarun.doctor.active.probe"


def _probes(proc: subprocess.Popen) -> list[psutil.Process]:
    found = []
    for kid in psutil.Process(proc.pid).children(recursive=True):
        try:
            if PROBE in " ".join(kid.cmdline()):
                found.append(kid)
        except psutil.Error:
            pass
    return found


def _stop_while_measuring(words: list[str], tmp: Path, sig: int) -> tuple[str, int, list]:
    """Run ``milarun WORDS`` with its own temp folder; ``sig`` once its probe runs and its
    doctor folder exists. Returns its stderr, exit code and the probes still running."""
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "milarun", *words],
        cwd=ROOT,
        env=cli_env({"TMPDIR": str(tmp)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    probes: list[psutil.Process] = []
    while time.monotonic() < deadline and proc.poll() is None:
        probes = _probes(proc)
        if probes and list(tmp.glob("milarun-doctor-*/*.spec.json")):
            break
        time.sleep(0.05)
    assert probes and proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    gone, alive = psutil.wait_procs(probes, timeout=5)
    for p in alive:  # never left to the next tests
        p.kill()
    return stderr, proc.returncode, alive


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_to_doctor_active_leaves_nothing(tmp_path, sig):
    rec = tmp_path / "rec.json"
    words = ["doctor", "--active", "quick", "--devices", "cpu:1", "--json", str(rec)]
    stderr, code, alive = _stop_while_measuring(words, tmp_path / "tmp", sig)
    name = signal.Signals(sig).name
    assert code == 128 + sig and "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last == (
        f"milarun: doctor --active stopped by {name}: its probes were stopped and its temp "
        "folder removed; nothing was recorded"
    )
    assert sum(line.startswith("milarun:") for line in stderr.splitlines()) == 1, stderr
    assert not alive and list((tmp_path / "tmp").iterdir()) == [] and not rec.exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_to_jobs_doctor_leaves_nothing_and_runs_nothing(tmp_path, sig):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"run": {"experiment": "faulty:steps"}}))
    out = tmp_path / "out"
    words = ["jobs", str(prof), "--devices", "cpu:1", "--doctor", "quick", "-o", str(out)]
    stderr, code, alive = _stop_while_measuring(words, tmp_path / "tmp", sig)
    assert code == 128 + sig and "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"milarun: jobs --doctor quick stopped by {signal.Signals(sig).name}")
    assert last.endswith("nothing was recorded and no job run")
    assert not alive and list((tmp_path / "tmp").iterdir()) == []
    assert not out.exists() or not list(out.rglob("*.json"))
