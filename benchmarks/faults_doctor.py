"""The fault campaign, the doctor (issue 40): doctor probes under faults. A probe SIGKILLed,
SIGILLed or hung past its timeout during `doctor --active` and `jobs --doctor quick` (the real
CLI on CPU slices, the real probes), a probe dying of a CUDA error or hung on a GPU (the fakes
that tests/doctor uses: NVML and a probe child that writes what the torch one would), SIGINT to
the doctor and to `jobs --doctor`. The record must say which probe and why, `jobs` refuse to
start on a FAIL and start with --force, no probe process outlive the doctor. Run by faults.py;
`python faults_doctor.py MODE ...` is its fake-GPU doctor (see fake_doctor)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from faultkit import ENV, ROOT, Outcome, clean, profile, results_in, start

PROBES = ("milarun.doctor.active.probe", "fake_probe.py")
STEPS = {"experiment": "faulty:steps", "arguments": {"--min-slices": 4}}


@dataclass
class Watched:
    """A doctor run: how it ended, what it printed, the probe processes it started and
    those still alive after it."""

    done: subprocess.CompletedProcess
    probes: list[psutil.Process] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    harmed: bool = False

    def line(self, start: str) -> str:
        return next((x for x in self.done.stdout.splitlines() if x.startswith(start)), "")


def _probes(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for kid in kids:
        try:
            if any(p in " ".join(kid.cmdline()) for p in PROBES):
                found.append(kid)
        except psutil.Error:
            pass
    return found


def watch(proc: subprocess.Popen, harm: Callable[[psutil.Process], None] | None) -> Watched:
    """Wait for ``proc``; ``harm`` its first probe once that has measured for a second."""
    seen: dict[int, psutil.Process] = {}
    began, harmed = None, False
    while proc.poll() is None:
        for p in _probes(proc):
            seen.setdefault(p.pid, p)
        if seen and began is None:
            began = time.monotonic()
        if harm is not None and not harmed and began and time.monotonic() - began > 1.0:
            harm(next(iter(seen.values())))
            harmed = True
        time.sleep(0.05)
    stdout, stderr = proc.communicate(timeout=60)
    time.sleep(0.5)
    left = [p.pid for p in seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return Watched(done, list(seen.values()), left, harmed)


def refusal(done: subprocess.CompletedProcess) -> str:
    """The one error line of a run refused after it measured (its progress lines before it
    on stderr too), or "" when it was not refused so."""
    errors = [x for x in done.stderr.splitlines() if x.startswith("milarun: error:")]
    return errors[0] if done.returncode == 1 and clean(done) and len(errors) == 1 else ""


def ran(out: Path) -> int:
    """Results the run wrote (the doctor's records beside them are no result)."""
    return sum(r.get("name") == "p.run" for r in results_in(out))


def signal_to(sig: int) -> Callable[[psutil.Process], None]:
    return lambda probe: probe.send_signal(sig)


def checks_of(path: Path) -> dict[str, dict]:
    if not path.is_file():
        return {}
    return {c["name"]: c for c in json.loads(path.read_text())["checks"]}


# -- the real CLI on a CPU slice --------------------------------------------------------------
def doctor_probe_dies(tmp: Path, sig: int) -> Outcome:
    """`doctor --active quick` while its probe gets ``sig``: exit 1, its line and record
    name the probe and the signal and the phase, no probe left."""
    rec = tmp / "rec.json"
    proc = start("doctor", "--active", "quick", "--devices", "cpu:1", "--json", rec)
    seen = watch(proc, signal_to(sig))
    name = signal.Signals(sig).name
    said = checks_of(rec).get("cpu:0 probe", {})
    named = said.get("status") == "FAIL" and f"killed by {name} during" in said.get("detail", "")
    ok = seen.harmed and seen.done.returncode == 1 and clean(seen.done) and named
    return ok and not seen.left, 0, f"exit {seen.done.returncode}; record: {said.get('detail')!r}"


def doctor_interrupted(tmp: Path) -> Outcome:
    """SIGINT to `doctor --active` while it measures: exit 130 in one line, no probe left,
    no record half-written."""
    rec = tmp / "rec.json"
    proc = start("doctor", "--active", "quick", "--devices", "cpu:1", "--json", rec)
    seen = watch(proc, lambda probe: os.kill(proc.pid, signal.SIGINT))
    last = (seen.done.stderr.strip().splitlines() or [""])[-1]
    ok = seen.harmed and seen.done.returncode == 130 and last == "milarun: interrupted"
    ok = ok and clean(seen.done) and not seen.left and not rec.exists()
    return ok, 0, f"exit {seen.done.returncode}: {last!r}, {len(seen.left)} probe(s) left"


def _jobs(tmp: Path, out: Path, *extra: str) -> subprocess.Popen:
    prof = profile(tmp, run=STEPS)
    return start("jobs", prof, "--devices", "cpu:1", "--doctor", "quick", "-o", out, *extra)


def jobs_doctor_probe_dies(tmp: Path) -> Outcome:
    """`jobs --doctor quick` whose probe is SIGKILLed: refused in one line, nothing run, the
    record in the folder names the probe; again with --force and its probe SIGILLed: the
    run starts and ends, a second record beside the first."""
    out = tmp / "out"
    refused = watch(_jobs(tmp, out), signal_to(signal.SIGKILL))
    first = checks_of(out / "doctor-active.json").get("cpu:0 probe", {})
    forced = watch(_jobs(tmp, out, "--force"), signal_to(signal.SIGILL))
    records = sorted(out.glob("doctor-active.*.json"))
    second = checks_of(records[0]).get("cpu:0 probe", {}) if records else {}
    ok = "cpu:0 probe" in refusal(refused.done) and refused.harmed
    ok = ok and "killed by SIGKILL" in first.get("detail", "") and forced.harmed
    ok = ok and forced.done.returncode == 0 and "killed by SIGILL" in second.get("detail", "")
    count = ran(out)
    ok = ok and count == 1 and not refused.left and not forced.left
    return (
        ok,
        max(0, 1 - count),
        f"exit {refused.done.returncode} ({refused.done.stderr.strip()[-70:]!r}), then with "
        f"--force exit {forced.done.returncode}, {count} result(s); records: "
        f"{first.get('detail')!r}, {second.get('detail')!r}",
    )


def jobs_doctor_probe_hangs(tmp: Path) -> Outcome:
    """`jobs --doctor quick` whose probe stops (SIGSTOP): killed at the quick level's
    timeout, a FAIL that says so, nothing run, no probe left."""
    out = tmp / "out"
    seen = watch(_jobs(tmp, out), signal_to(signal.SIGSTOP))
    said = checks_of(out / "doctor-active.json").get("cpu:0 probe", {})
    hung = "did not finish in" in said.get("detail", "") and "(killed)" in said["detail"]
    ok = bool(refusal(seen.done)) and hung and not ran(out) and not seen.left
    return ok, 0, f"exit {seen.done.returncode}; record: {said.get('detail')!r}"


def jobs_doctor_interrupted(tmp: Path) -> Outcome:
    """SIGINT to `jobs --doctor quick` while its probe measures: exit 130, nothing run, no
    probe left."""
    out = tmp / "out"
    proc = _jobs(tmp, out)
    seen = watch(proc, lambda probe: os.kill(proc.pid, signal.SIGINT))
    ok = seen.harmed and seen.done.returncode == 130 and clean(seen.done)
    ok = ok and not ran(out) and not seen.left
    return ok, 0, f"exit {seen.done.returncode}, {len(seen.left)} probe(s) left"


# -- GPUs, through the fakes of tests/doctor -------------------------------------------------
def fake_doctor(argv: list[str]) -> int:
    """``MODE FAULTS TIMEOUT OUT [force]``: the active checks of two fake H100s (tests/doctor's
    NVML and probe child, ``FAULTS`` by GPU index as fake_probe.py reads them), as
    `doctor --active` (MODE doctor: the record written to OUT) or as `jobs --doctor` (MODE
    jobs: the record in the folder OUT, a FAIL refused unless ``force``)."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "doctor")]
    from test_active_gpu import fake_setup, gpus

    from milarun import errors
    from milarun.doctor.active import before_jobs, record, run
    from milarun.doctor.passive.checks import render

    mode, faults, timeout, out = argv[0], json.loads(argv[1]), float(argv[2]), Path(argv[3])
    setup = fake_setup(gpus(2), faults, timeout)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def emit(check: Any) -> None:
        print(render(check), flush=True)

    try:
        if mode == "jobs":
            before_jobs.check("quick", "0,1", out, argv[4:] == ["force"], say, emit, setup)
            return 0
        found = run.run("quick", "0,1", setup, say, emit)
        record.write(out, found)
        return int(found["exit_code"])
    except errors.UserError as err:
        print(f"milarun: error: {err}", file=sys.stderr)
        return 1


def _fake(tmp: Path, mode: str, faults: dict, out: Path, *extra: str) -> Watched:
    proc = subprocess.Popen(
        [sys.executable, __file__, mode, json.dumps(faults), "4", str(out), *extra],
        cwd=tmp, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return watch(proc, None)


def gpu_probe_faults(tmp: Path) -> Outcome:
    """Two fake GPUs: one's probe dies of a CUDA error, then one's hangs past its timeout
    (4 s here): exit 1, the record names the probe, the phase and the error."""
    outcomes = {}
    for label, fault, words in (
        ("CUDA error", {"1": {"cuda_error": "gemm_fp16"}}, "exited with 1 during gemm_fp16: "
         "RuntimeError: CUDA error: an illegal memory access"),
        ("hung", {"0": {"hang": "memory_bandwidth"}}, "did not finish in 4 s during "
         "memory_bandwidth (killed)"),
    ):  # fmt: skip
        rec = tmp / f"{label}.json"
        seen = _fake(tmp, "doctor", fault, rec)
        gpu = "cuda:1" if "1" in fault else "cuda:0"
        said = checks_of(rec).get(f"{gpu} probe", {})
        fine = seen.done.returncode == 1 and words in said.get("detail", "") and not seen.left
        outcomes[label] = (fine and clean(seen.done), said.get("detail", "no record")[:110])
    return all(f for f, _ in outcomes.values()), 0, str({k: d for k, (_, d) in outcomes.items()})


def gpu_jobs_doctor(tmp: Path) -> Outcome:
    """`jobs --doctor` on two fake GPUs, one's probe SIGILLed mid-GEMM: refused in one line
    naming it, the record says so; with --force it goes on, a second record beside it."""
    out = tmp / "out"
    crash = {"1": {"crash": "gemm_fp8", "crash_signal": "SIGILL"}}
    refused = _fake(tmp, "jobs", crash, out)
    forced = _fake(tmp, "jobs", crash, out, "force")
    said = checks_of(out / "doctor-active.json").get("cuda:1 probe", {})
    records = sorted(p.name for p in out.glob("doctor-active*.json"))
    ok = "cuda:1 probe" in refusal(refused.done)
    ok = ok and "killed by SIGILL during gemm_fp8" in said.get("detail", "")
    ok = ok and forced.done.returncode == 0 and len(records) == 2
    ok = ok and not refused.left and not forced.left
    return (
        ok,
        0,
        f"exit {refused.done.returncode} then {forced.done.returncode} (--force); records "
        f"{records}: {said.get('detail')!r}",
    )


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "doctor: probe SIGKILLed": lambda t: doctor_probe_dies(t, signal.SIGKILL),
    "doctor: probe SIGILL": lambda t: doctor_probe_dies(t, signal.SIGILL),
    "doctor: SIGINT": doctor_interrupted,
    "doctor: jobs --doctor, probe killed": jobs_doctor_probe_dies,
    "doctor: jobs --doctor, probe hung": jobs_doctor_probe_hangs,
    "doctor: jobs --doctor, SIGINT": jobs_doctor_interrupted,
    "doctor: GPU probe CUDA error, hung": gpu_probe_faults,
    "doctor: jobs --doctor on GPUs, SIGILL": gpu_jobs_doctor,
}


if __name__ == "__main__":
    sys.exit(fake_doctor(sys.argv[1:]))
