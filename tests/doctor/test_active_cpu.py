"""`doctor --active` on CPU slices, for real: the probes measure this machine's cores, in real
student cgroups where this machine lets the tests make them (root, cgroup v1 with
cgroup-tools: the ``students`` fixture of tests/conftest.py), else pinned to the
slices' CPUs. The runs are bounded by time (a fixed number of samples of fixed seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial

import pytest

from conftest import milarun
from milarun.doctor.active import judge, judge_cpu, record
from milarun.doctor.active.run import Setup, run
from milarun.doctor.check import Check
from milarun.machine import isolation
from students import _v1_ready

HOG = "while True: pass"
# One worker, in a row: the hog of one test would slow the other's slice.
pytestmark = [
    pytest.mark.xdist_group(name="cpu_slices"),
    pytest.mark.usefixtures("cpu_hogs_alone"),
    pytest.mark.slow,  # real probes on both slices, seconds each
]


def _hog_on(cpu: int) -> None:
    """A rogue process on this CPU at a higher priority than the probes (nice -10): on a busy
    machine the scheduler would otherwise even the load out, moving the other processes away
    from this CPU onto the sibling slice's (a hog at the probes' priority measured 0.8-0.97x here
    with other tests running). Its own session, so where the kernel groups a session's
    processes (sched_autogroup) the priority is its group's too."""
    os.sched_setaffinity(0, {cpu})
    os.setsid()
    os.nice(-10)
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("-10")
    except OSError:
        pass  # no autogroup here: the nice value is the priority


@pytest.fixture
def slices(request) -> str | None:
    """The cgroup parent of two real student groups (None: they cannot be made here)."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs: one per slice")
    if _v1_ready() is None:
        parent, _ = request.getfixturevalue("students")
        return parent
    return None


def _env(parent: str | None) -> dict[str, str]:
    return {isolation.PARENT_ENV: parent} if parent else {}


def _unexplained(found: dict) -> list[dict]:
    """The slices' checks that neither pass nor say why not. A busy machine (CI: other
    tests' processes on these two CPUs) can slow one slice enough for the sibling test to
    WARN or FAIL, which is the check working: the doctor must then have measured the others
    on that slice and say so."""
    return [
        check
        for check in found["checks"]
        if check["name"].startswith("cpu:")
        and check["status"] not in ("PASS", "INFO")
        and not ("siblings" in check["detail"] and "other processes took" in check["detail"])
        and "not verdict-grade, the machine was busy" not in check["detail"]
    ]


def test_two_cpu_slices_are_measured_and_pass(slices, tmp_path):
    # PASS on a quiet machine. On this shared VM a slice's memory copy also drifts by a
    # tenth within seconds with nothing else running (0.86-1.17x its sibling in three runs
    # here), and its eight samples are not independent: in CI a significant 0.94x WARN came
    # with no more of its CPUs taken by other processes than of its sibling's. As the
    # doctor's advice for a slice flagged on a busy machine says: measure again; a slice
    # that is really slower is flagged twice.
    flagged: list[dict] = []
    for attempt in ("first", "again"):
        out = tmp_path / f"doctor-{attempt}.json"
        done = milarun(
            "doctor", "--active", "quick", "--devices", "cpu:2", "--json", out, env=_env(slices)
        )
        found = record.read(out)
        unexplained = _unexplained(found)
        flagged += unexplained
        if not unexplained:
            break
    assert not unexplained, flagged
    judged = [c for c in found["checks"] if c["name"].startswith("cpu:")]
    assert done.returncode == (1 if found["verdict"] == "FAIL" else 0), done.stdout + done.stderr
    assert found["level"] == "quick" and len(judged) >= 4
    for label in ("cpu:0", "cpu:1"):
        for metric in ("cpu_gemm", "cpu_memory_bandwidth"):
            measured = found["measurements"][label][metric]
            assert len(measured["samples"]) >= 3 and 0 <= measured["others"] <= 1
    assert found["units"]["cpu:0"]["cpus"] != found["units"]["cpu:1"]["cpus"]
    if slices:  # in the student groups `jobs` uses
        assert "student0" in found["units"]["cpu:0"]["placement"]


def test_a_slice_with_a_cpu_hog_on_its_cores_fails_the_sibling_test(slices, monkeypatch):
    if slices:
        monkeypatch.setenv(isolation.PARENT_ENV, slices)
    plan = isolation.machine_plan(["0", "1"], isolation.find_hierarchies(), {})
    cpus = set(plan[1].cpus)
    hogs = [
        subprocess.Popen([sys.executable, "-c", HOG], preexec_fn=partial(_hog_on, c)) for c in cpus
    ]
    try:
        checks: list[Check] = []
        found = run("quick", "cpu:2", Setup(), lambda line: None, checks.append)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    lines = {c.name: c for c in checks}
    slow = lines["cpu:1 gemm fp32"]
    quiet = lines["cpu:0 gemm fp32"]  # no verdict where others took a quarter of it too
    assert quiet.status == "PASS" or "not verdict-grade, the machine was busy" in quiet.detail
    assert "significantly slower" in slow.detail and "other processes took" in slow.detail
    if slow.status == "WARN":
        # The test's own machine as busy on the sibling's CPUs as the hog made this one (other
        # tests in parallel): which slice is slowed most is chance there, no verdict (issue 49)
        assert "a busy machine, no verdict on this slice" in slow.detail, slow
        assert "not verdict-grade, the machine was busy" in quiet.detail, quiet
        return
    assert slow.status == "FAIL", slow  # about half its sibling's rate: under 0.8 of it
    assert "ps -eo" in str(slow.fix)
    assert found["exit_code"] == 1 and found["verdict"] == "FAIL"
    json.dumps(found)  # the record is plain JSON


def test_doctor_without_active_imports_no_torch_and_no_probe(tmp_path):
    from test_layering import modules_of

    modules = modules_of("doctor", "--devices", "cpu:1", "--json", tmp_path / "passive.json")
    assert "torch" not in modules
    probes = {f"milarun.doctor.active.{m}" for m in ("probe", "gpu", "cpu", "node")}
    assert not probes & modules  # the measuring side: only in the probe children
    found = record.read(tmp_path / "passive.json")
    assert found["level"] == "passive" and found["measurements"] == {}
    assert any(c["name"] == "cgroups" for c in found["checks"])


def _slice(label: str, gemm: float, others: float) -> judge.Probed:
    samples = [gemm * (1 + 0.01 * k) for k in range(-3, 4)]
    phases = {
        phase: {"unit": "x", "samples": samples, "others": others} for phase in judge_cpu.CPU_PHASES
    }
    return judge.Probed(label, "cpu", {"phases": phases, "done": True}, 0)


@pytest.mark.parametrize(
    ("others", "status", "says"),
    [
        ((0.0, 0.6), "FAIL", "other processes took 60% of its CPUs meanwhile (its siblings': 0%)"),
        ((0.3, 0.35), "WARN", "a busy machine, no verdict on this slice"),
        ((0.0, 0.02), "FAIL", "significantly slower"),
    ],
    ids=["a rogue process on it", "every slice busy", "a quiet machine"],
)
def test_a_slower_slice_is_read_with_what_others_took_of_the_cpus(others, status, says):
    """The sibling test's verdict, read with others' share of each slice's CPUs: a FAIL that
    names the rogue process, a WARN (no verdict) when every slice was busy, else as judged."""
    units = [_slice("cpu:0", 100.0, others[0]), _slice("cpu:1", 60.0, others[1])]
    checks = {c.name: c for c in judge_cpu.cpu_checks(units)}
    slow = checks["cpu:1 gemm fp32"]
    assert slow.status == status and says in slow.detail, slow
    quiet = checks["cpu:0 gemm fp32"]  # busy from a quarter: no verdict (issue 49)
    assert quiet.status == ("WARN" if others[0] >= 0.25 else "PASS"), quiet


def test_a_lone_slice_on_a_busy_machine_is_no_verdict():
    """cpu:1 has no sibling: on a busy machine its PASS said nothing of its load (GEMM 5.6
    then 22.8 GFLOP/s a minute apart). From a quarter of its CPUs taken, as the report's busy
    flag: WARN, not verdict-grade; below it, the verdict stands."""
    for others, status in ((0.62, "WARN"), (0.05, "PASS")):
        checks = {c.name: c for c in judge_cpu.cpu_checks([_slice("cpu:0", 100.0, others)])}
        line = checks["cpu:0 gemm fp32"]
        assert line.status == status, line
        busy = "other processes took 62% of its CPUs meanwhile: not verdict-grade"
        assert (busy in line.detail) == (status == "WARN"), line
