"""Warm starts (issue 36): instances forked from a warm process, with real processes, real
student cgroups and real signals. A forked instance finds what a cold one finds; nothing an
instance does reaches the next; a crash, a dead warm process or a tainting import loses no
run and says how each instance started."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from conftest import load_all, milarun
from milarun.machine import isolation
from students import ISO_JOB, needs_v1

# What must be the same, warm or cold (the seeds and "forked" must not).
INHERITED = (
    "dtype_bits",
    "threads",
    "cpus",
    "grad",
    "deterministic",
    "python_threads",
    "stdin_is_null",
    "leaked_module",
    "session_leader",
    "gpus_hidden",
    "fsize_limit",
)


def by_name(out: Path) -> dict[tuple[str, str], dict]:
    return {(r["name"].split(".", 1)[1], r["job_id"]): r for r in load_all(out).values()}


def write_profile(path: Path, jobs: dict[str, str], **common: object) -> Path:
    path.write_text(
        json.dumps(
            {
                "*": {"max_duration": 120, "arguments": {"--min-slices": 4}, **common},
                **{name: {"experiment": experiment} for name, experiment in jobs.items()},
            }
        )
    )
    return path


@pytest.mark.root("creates cgroups")
@pytest.mark.slow
@needs_v1
def test_a_forked_instance_finds_what_a_cold_one_finds(students, tmp_path):
    """In its student cgroup, with its threads and its own random draws; and after a test
    that spoils every global it can, the next instance finds none of it."""
    parent, _ = students
    prof = write_profile(
        tmp_path / "p.json",
        {"a": "warmth:state", "leak": "warmth:leaks", "b": "warmth:state"},
        **ISO_JOB,
    )
    found = {}
    for mode, options in (("warm", ()), ("cold", ("--cold-start",))):
        out = tmp_path / mode
        done = milarun("jobs", prof, "--devices", "cpu:2", "-o", out, *options,
                       env={isolation.PARENT_ENV: parent})  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        found[mode] = by_name(out)
    warm, cold = found["warm"], found["cold"]
    assert len(warm) == len(cold) == 6
    for key, result in warm.items():
        assert result["success"] and result["startup"]["start"] == "forked", result["startup"]
        assert result["startup"]["start_note"] is None
        assert cold[key]["startup"]["start"] == "cold"
        assert cold[key]["startup"]["start_note"] is None  # as asked: --cold-start
        # in its own student group, on its own CPU, as the cold one
        assert (
            result["isolation"]["cgroups"]["cpuset"] == cold[key]["isolation"]["cgroups"]["cpuset"]
        )
        assert result["isolation"]["cpus"] == cold[key]["isolation"]["cpus"]
        assert result["isolation"]["cgroups"]["cpuset"].endswith(f"student{key[1][-1]}")
        mine = {k: result["metrics"][k] for k in INHERITED}
        assert mine == {k: cold[key]["metrics"][k] for k in INHERITED}, key
        assert mine["dtype_bits"] == 32 and mine["leaked_module"] == 0
        assert mine["session_leader"] == 1 and mine["stdin_is_null"] == 1
        assert result["metrics"]["forked"] == 1 and cold[key]["metrics"]["forked"] == 0
        # launch to first slice, as measured, is a start-up's figure
        assert 0 < result["startup"]["import"] < result["startup"]["to_first_slice"]
    for seed in ("numpy_draw", "torch_seed"):  # each seeded at random, as a fresh process
        draws = [r["metrics"][seed] for r in warm.values()]
        assert len(set(draws)) == len(draws), seed


@pytest.mark.slow
def test_crashes_a_dead_warm_process_and_a_tainting_import_lose_no_run(tmp_path):
    prof = write_profile(
        tmp_path / "p.json",
        {
            "taint": "warmth_taint:main",
            "after": "warmth:state",
            "killer": "warmth:kills_its_warm_process",
            "next": "warmth:state",
            "crash": "warmth:segfaults",
            "last": "warmth:state",
        },
    )
    out = tmp_path / "out"
    done = milarun("jobs", prof, "--devices", "cpu:1", "-o", out)
    assert done.returncode == 1, done.stdout + done.stderr  # the crash
    found = by_name(out)
    start = {name: found[(name, "0.0")]["startup"] for name, _ in found}
    # An import that changes torch's defaults: its own instance has them (as cold), the
    # warm process retires and the next test gets a fresh one, with torch's defaults.
    assert found[("taint", "0.0")]["metrics"]["dtype_bits"] == 64
    assert start["taint"]["start"] == "forked"
    assert found[("after", "0.0")]["metrics"]["dtype_bits"] == 32
    assert "a fresh warm process" in start["after"]["start_note"]
    assert "importing warmth_taint changed dtype" in start["after"]["start_note"]
    # The warm process killed under a running instance: the instance finishes and is
    # recorded; the next one gets a fresh warm process.
    assert found[("killer", "0.0")]["success"] is True
    assert start["killer"]["start"] == "forked"
    assert found[("next", "0.0")]["success"] is True
    assert "died" in start["next"]["start_note"]
    # A segfault is the instance's alone: recorded, and the same warm process goes on.
    crash = found[("crash", "0.0")]
    assert crash["success"] is False
    assert crash["failure"] == {"kind": "crash", "message": "died of SIGSEGV"}
    assert found[("last", "0.0")]["success"] is True
    assert start["last"] == {**start["last"], "start": "forked", "start_note": None}
    assert "died of SIGSEGV" in done.stdout
    # the warm processes are gone with the run, and each said what it did in its log
    assert len(list((out / "logs" / "warm").glob("*.log"))) == 3
    assert not [
        p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])
    ]


@pytest.mark.slow
def test_an_exec_prefix_or_torchrun_starts_cold_and_says_why(tmp_path):
    prof = tmp_path / "p.json"
    prof.write_text(
        json.dumps(
            {
                "*": {"max_duration": 120, "arguments": {"--min-slices": 4}},
                "env": {"experiment": "warmth:state", "exec_prefix": ["env", "MILARUN_X=1"]},
                "nice": {"experiment": "warmth:state", "exec_prefix": ["nice", "-n", "0"]},
            }
        )
    )
    out = tmp_path / "out"
    done = milarun("jobs", prof, "--devices", "cpu:1", "-o", out)
    assert done.returncode == 0, done.stdout + done.stderr
    found = by_name(out)
    # `env NAME=VALUE` only sets variables: forked with them set
    assert found[("env", "0.0")]["startup"]["start"] == "forked"
    assert found[("env", "0.0")]["environ"]["MILARUN_X"] == "1"
    # any other prefix must exec the test: a cold start, with the reason
    nice = found[("nice", "0.0")]["startup"]
    assert nice["start"] == "cold" and "exec_prefix nice" in nice["start_note"]
