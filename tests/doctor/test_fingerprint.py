"""Silent data corruption in `doctor --active` (issue 51): the real fingerprint computation on
CPU slices (the CI's path), a bit planted in one slice's GEMM chain found, the reference kept
per model and stack in the results database by the first clean run and judged against after;
on GPUs through the fake probe (tests/doctor/fake_probe.py) and fake NVML."""

from __future__ import annotations

import numpy as np
import pytest
from test_active_gpu import fake_setup, gpus

from milarun.doctor.active import fingerprint
from milarun.doctor.active.run import Setup
from milarun.doctor.active.run import run as run_active
from milarun.doctor.check import Check
from milarun.history import fingerprints

SMALL = {"gemm_size": 64, "copy_bytes": 2**20}  # the sizes of the other figures: bounded


def active(spec: str, setup: Setup) -> tuple[dict[str, Check], dict]:
    checks: list[Check] = []
    found = run_active("quick", spec, setup, lambda line: None, checks.append)
    return {c.name: c for c in checks}, found


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "history.sqlite"
    monkeypatch.setenv("MILARUN_DB", str(path))
    return str(path)


def test_the_computation_is_deterministic_and_a_flipped_bit_changes_it(monkeypatch):
    first, again = fingerprint.on_numpy(), fingerprint.on_numpy()
    assert first == again and first["finite"] and len(first["fingerprint"]) == 16
    monkeypatch.setenv("MILARUN_DEVICE", "cpu:1")
    monkeypatch.setenv(fingerprint.FLIP_ENV, "cpu:1")
    flipped = fingerprint.on_numpy()
    assert flipped["training"] == first["training"]
    assert flipped["gemm_chain"] != first["gemm_chain"]
    assert flipped["fingerprint"] != first["fingerprint"]
    one = np.ones((2, 2), dtype=np.float32)
    assert (fingerprint.flip_bit(one) != one).sum() == 1  # one element, one bit


def test_cpu_slices_keep_a_reference_then_match_it(db):
    checks, found = active("cpu:2", Setup(spec=SMALL))
    first = checks["cpu:0 fingerprint"]
    assert first.status == "INFO" and "kept as the reference" in first.detail, first
    assert checks["cpu:1 fingerprint"].detail.split(":")[0] == first.detail.split(":")[0]
    stacks = {found["fingerprints"][d]["stack"] for d in ("cpu:0", "cpu:1")}
    (stack,) = stacks
    kept = fingerprints.references(db, [stack])[stack]
    assert kept.fingerprint == found["fingerprints"]["cpu:0"]["fingerprint"]
    checks, found = active("cpu:2", Setup(spec=SMALL))
    for label in ("cpu:0", "cpu:1"):
        line = checks[f"{label} fingerprint"]
        assert line.status == "PASS" and "matches the reference" in line.detail, line


def test_a_planted_bit_flip_on_a_cpu_slice_fails_it_with_both_hashes(db):
    active("cpu:2", Setup(spec=SMALL))  # the clean run: the reference
    planted = Setup(spec=SMALL, environ={fingerprint.FLIP_ENV: "cpu:1"})
    checks, found = active("cpu:2", planted)
    bad, good = checks["cpu:1 fingerprint"], checks["cpu:0 fingerprint"]
    assert good.status == "PASS"
    assert bad.status == "FAIL" and "silent data corruption" in bad.detail and bad.fix
    mine = found["fingerprints"]["cpu:1"]["fingerprint"]
    reference = found["fingerprints"]["cpu:0"]["fingerprint"]
    assert mine in bad.detail and reference in bad.detail and mine != reference
    assert found["verdict"] == "FAIL" and found["exit_code"] == 1


def test_two_slices_that_disagree_without_a_reference_both_fail_and_none_is_kept(db):
    planted = Setup(spec=SMALL, environ={fingerprint.FLIP_ENV: "cpu:0"})
    checks, found = active("cpu:2", planted)
    assert checks["cpu:0 fingerprint"].status == checks["cpu:1 fingerprint"].status == "FAIL"
    assert "no reference tells which" in checks["cpu:1 fingerprint"].detail
    stack = found["fingerprints"]["cpu:0"]["stack"]
    assert fingerprints.references(db, [stack]) == {}


def test_a_gpu_with_a_flipped_bit_fails_against_its_siblings(db):
    checks, found = active("0,1,2,3", fake_setup(gpus(4), {"2": {"fingerprint": "flip"}}))
    bad = checks["cuda:2 fingerprint"]
    assert bad.status == "FAIL" and "the other NVIDIA H100 80GB HBM3 devices" in bad.detail
    assert "5eed5eed5eed4eed" in bad.detail and "5eed5eed5eed5eed" in bad.detail
    assert checks["cuda:0 fingerprint"].status == "PASS"
    assert found["verdict"] == "FAIL"
    # three agreeing GPUs and one that does not: no reference is made of that run
    stack = "NVIDIA H100 80GB HBM3 | torch fake | cuda fake | fingerprint v1"
    assert fingerprints.references(db, [stack]) == {}
    checks, _ = active("0,1", fake_setup(gpus(2)))  # a clean run keeps it
    assert fingerprints.references(db, [stack])[stack].fingerprint == "5eed5eed5eed5eed"
    checks, _ = active("0", fake_setup(gpus(1), {"0": {"fingerprint": "flip"}}))
    assert checks["cuda:0 fingerprint"].status == "FAIL"  # a lone GPU: against the reference
    assert "the reference for NVIDIA H100 80GB HBM3" in checks["cuda:0 fingerprint"].detail


def test_an_unusable_database_is_a_warning_not_a_crash(tmp_path, monkeypatch):
    (tmp_path / "not-a-db").write_text("hello")
    monkeypatch.setenv("MILARUN_DB", str(tmp_path / "not-a-db"))
    checks, _ = active("0,1", fake_setup(gpus(2)))
    assert checks["fingerprint reference"].status == "WARN"
    assert checks["cuda:0 fingerprint"].status == "INFO"


def test_an_install_without_sqlalchemy_still_judges_the_devices_among_themselves(monkeypatch):
    """A GPU machine whose environment lacked SQLAlchemy crashed `doctor --active` here: the
    reference store cannot be imported (a real ImportError), the devices are still compared."""
    import sys

    import milarun.history

    for name in [m for m in sys.modules if m == "sqlalchemy" or m.startswith("sqlalchemy.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)  # `import sqlalchemy` raises
    monkeypatch.delitem(sys.modules, "milarun.history.fingerprints", raising=False)
    monkeypatch.delattr(milarun.history, "fingerprints", raising=False)
    checks, found = active("0,1,2", fake_setup(gpus(3), {"1": {"fingerprint": "flip"}}))
    assert checks["fingerprint reference"].status == "WARN"
    assert "cannot be opened" in checks["fingerprint reference"].detail
    assert checks["cuda:1 fingerprint"].status == "FAIL"
    assert checks["cuda:0 fingerprint"].status == "PASS"
