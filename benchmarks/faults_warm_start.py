"""The fault campaign, warm starts (issue 36). Instances forked from a warm process
that is SIGKILLed between and during instances, forked instances SIGKILLed, segfaulting and
OOM-killed, a test that leaks a thread and spoils torch's globals before the next fork.
Each run must lose nothing and say how each instance started. Run by faults.py."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
from faultkit import Outcome, clean, leftovers, milarun, profile, results_in, start, wait_for

STEPS = {"experiment": "faulty:steps", "arguments": {"--min-slices": 12}}
STATE = {"experiment": "warmth:state", "arguments": {"--min-slices": 4}}


def _warm(marker: str) -> list[psutil.Process]:
    """The run's warm processes (its forks share their command line: the oldest)."""
    found = [p for p in leftovers(marker) if "milarun.cli.warmstart" in " ".join(p.cmdline())]
    found.sort(key=lambda p: p.create_time())
    forks = {c.pid for p in found for c in p.children()}
    return [p for p in found if p.pid not in forks]


def _by_name(out: Path) -> dict[str, dict]:
    return {r["name"].split(".", 1)[1] + " J" + r["job_id"]: r for r in results_in(out)}


def _starts(found: dict[str, dict]) -> str:
    """How each instance started, and why where it is not the usual."""
    said = []
    for name, result in sorted(found.items()):
        start = result.get("startup") or {}
        note = f" ({start['start_note'][:40]})" if start.get("start_note") else ""
        said.append(f"{name} {start.get('start')}{note}")
    return ", ".join(said)


def _run(tmp: Path, jobs: dict, devices: str, act: Callable[[Path], str]) -> tuple[dict, str, bool]:
    """``jobs`` in order on ``devices``; ``act`` does its harm meanwhile. Returns the results
    by name, what happened, and whether the run ended clean (no traceback, nothing left)."""
    out = tmp / "out"
    path = tmp / "p.json"
    path.write_text(json.dumps({"*": {"max_duration": 120}, **jobs}))
    proc = start("jobs", path, "--devices", devices, "-o", out)
    did = act(out)
    stdout, stderr = proc.communicate(timeout=600)
    time.sleep(2)
    left = leftovers(str(out))
    for p in left:
        p.kill()
    ok = "Traceback" not in stdout + stderr and not left and proc.returncode in (0, 1)
    return _by_name(out), f"{did}; exit {proc.returncode}, {len(left)} left", ok


def warm_killed_between(tmp: Path) -> Outcome:
    def act(out: Path) -> str:
        wait_for(lambda: any(out.glob("p.first.*.json")))
        warm = _warm(str(out))
        for p in warm:
            p.kill()
        return f"killed {len(warm)} warm process(es) after the first instance"

    # the second job's prepare holds the gap between the instances open: the kill lands in it
    later = {**STATE, "prepare": ["sleep 3"]}
    found, said, ok = _run(tmp, {"first": STATE, "second": later}, "cpu:1", act)
    second = found.get("second J0.0", {})
    fresh = "died" in ((second.get("startup") or {}).get("start_note") or "")
    ok = ok and len(found) == 2 and all(r["success"] for r in found.values()) and fresh
    return ok, 2 - len(found), f"{said}; {_starts(found)}"


def warm_killed_during(tmp: Path) -> Outcome:
    def act(out: Path) -> str:
        wait_for(lambda: any(p.children() for p in _warm(str(out))))
        time.sleep(2)  # the forked instances are measuring
        warm = _warm(str(out))
        for p in warm:
            p.kill()
        return f"killed {len(warm)} warm process(es) under 2 running instances"

    found, said, ok = _run(tmp, {"first": STEPS, "second": STATE}, "cpu:2", act)
    firsts = [r for k, r in found.items() if k.startswith("first")]
    ok = ok and len(found) == 4 and all(r["success"] for r in found.values()) and len(firsts) == 2
    return ok, 4 - len(found), f"{said}; {_starts(found)}"


def _instance_killed(tmp: Path, sig: int) -> Outcome:
    def act(out: Path) -> str:
        wait_for(lambda: any(p.children() for p in _warm(str(out))))
        time.sleep(2)
        forks = [c for p in _warm(str(out)) for c in p.children()]
        if forks:
            os.kill(forks[0].pid, sig)
        return f"{signal.Signals(sig).name} to a forked instance"

    found, said, ok = _run(tmp, {"first": STEPS, "next": STATE}, "cpu:2", act)
    failed = [r for r in found.values() if not r["success"]]
    after = [r for k, r in found.items() if k.startswith("next")]
    same = all(r["success"] and r["startup"]["start_note"] is None for r in after)
    ok = ok and len(found) == 4 and len(failed) == 1 and len(after) == 2 and same
    kinds = [(r["failure"] or {}).get("message") for r in failed]
    return ok, 4 - len(found), f"{said}; failed: {kinds}; {_starts(found)}"


def leaks_then_forks(tmp: Path) -> Outcome:
    jobs = {"leak": {"experiment": "warmth:leaks", "arguments": {"--min-slices": 4}}, "b": STATE}
    found, said, ok = _run(tmp, jobs, "cpu:1", lambda out: "a test spoils globals")
    metrics = found.get("b J0.0", {}).get("metrics") or {}
    clean_state = metrics.get("dtype_bits") == 32 and metrics.get("leaked_module") == 0
    clean_state = clean_state and metrics.get("grad") == 1 and metrics.get("deterministic") == 0
    ok = ok and len(found) == 2 and clean_state
    return ok, 2 - len(found), f"{said}; the next instance's state {metrics}"[:300]


def oom_killed(tmp: Path) -> Outcome:
    """A forked instance over its student group's memory limit: OOM, its sibling goes on."""
    if os.geteuid() != 0:
        return True, 0, "skipped: needs root for the student cgroups"
    parent = f"milarun-fault-{uuid.uuid4().hex[:8]}"
    env = {"MILARUN_CGROUP_PARENT": parent}
    made = milarun("cgroups", "setup", "--devices", "cpu:2", env=env)
    if made.returncode != 0:
        return True, 0, f"skipped: no student groups here ({made.stderr.strip()[:80]})"
    try:
        from milarun.machine import isolation

        mem = isolation.find_hierarchies()["memory"]
        limit = mem.dir(mem.path(f"{parent}/student0")) / "memory.limit_in_bytes"
        limit.write_text(str(1024 * 2**20))
        scheme = {"type": "per-gpu", "cgroup": "cpuset,memory:student{CUDA_VISIBLE_DEVICES}"}
        job = {"experiment": "faulty:hog_on_first_slice", "max_duration": 120,
               "partition_scheme": scheme}  # fmt: skip
        out = tmp / "out"
        done = milarun("jobs", profile(tmp, hog=job), "--devices", "cpu:2", "-o", out, env=env)
        found = {r["device"]: r for r in results_in(out)}
        oom = (found.get("cpu:0", {}).get("failure") or {}).get("kind") == "oom"
        sibling = found.get("cpu:1", {}).get("success") is True
        # the killed one's record is the harness's (no start-up of its own): its sibling's
        forked = (found.get("cpu:1", {}).get("startup") or {}).get("start") == "forked"
        ok = clean(done) and oom and sibling and forked and not leftovers(str(out))
        return ok, 2 - len(found), f"exit {done.returncode}, cpu:0 oom {oom}, cpu:1 ok {sibling}"
    finally:
        milarun("cgroups", "teardown", "--devices", "cpu:2", env=env)


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "warm process killed between instances": warm_killed_between,
    "warm process killed during instances": warm_killed_during,
    "forked instance SIGKILLed": lambda t: _instance_killed(t, signal.SIGKILL),
    "forked instance segfaults": lambda t: _instance_killed(t, signal.SIGSEGV),
    "forked instance OOM-killed": oom_killed,
    "a test spoils globals before the next fork": leaks_then_forks,
}
