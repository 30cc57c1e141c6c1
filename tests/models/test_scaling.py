"""The scaling test: DDP training of a torchvision network, plain and in process groups (CPU).

A real subprocess runs ``milarun run`` alone (world size 1); the distributed helpers run in
this process. Small network (resnet18 on 32 px, batch 8): a few seconds on one core.
"""

from __future__ import annotations

import pytest

from milarun.measure.experiment import BadTestArguments, Experiment, RateLog
from milarun.run.plan import free_port
from modelrun import run_trained

SMALL = ["--arch", "resnet18", "--image-size", "32", "--batch-size", "8"]
# Runs are as long as 6 slices of 0.5 s of training, however fast this machine is.
SLICES = 6
TORCHRUN_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)


@pytest.mark.slow
def test_single_process_run(tmp_path):
    result = run_trained(
        "scaling",
        None,
        tmp_path,
        [*SMALL, "--min-slices", str(SLICES)],
        env={"MILARUN_DEVICE": "cpu:0"},
    )
    assert result["metrics"]["world_size"] == 1
    assert result["timings"]["train"]["count"] % 8 == 0  # whole batches of 8
    assert "train_0" not in result["timings"]  # no process group, no per-rank records
    assert result["call"]["arguments"]["arch"] == "resnet18"


# Two ranks under torchrun: tests/run/test_jobs.py (the quick run's scaling.2) and, across
# nodes, tests/slurm/test_slurm.py.


# -- helpers in this process -----------------------------------------------------------------
def logged_experiment(steps: int) -> tuple[Experiment, RateLog]:
    """An Experiment whose ``train`` log holds ``steps`` blocks of 2 examples."""
    exp = Experiment("scaling")
    log = exp.rate_log("train", max_count=2 * steps)
    for _ in range(steps):
        with log.block(2):
            pass
    return exp, log


def test_helpers_without_torchrun(monkeypatch):
    from milabench import distributed

    for var in TORCHRUN_VARS:
        monkeypatch.delenv(var, raising=False)
    import torch

    assert distributed.init_from_env(torch.device("cpu")) == (0, 1)
    exp, _ = logged_experiment(steps=2)
    records = distributed.gather_rate_logs(exp)
    assert len(records) == 1 and records[0]["count"] == 4
    assert exp.extra_timings == {} and exp.write_result is True  # nothing gathered
    distributed.shutdown()  # no group: nothing to do


def test_gather_in_a_group_of_one(monkeypatch):
    """A one-rank gloo group: rank 0 gets train_0 and is the writer."""
    import torch

    from milabench import distributed

    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    assert distributed.init_from_env(torch.device("cpu")) == (0, 1)
    try:
        exp, log = logged_experiment(steps=3)
        records = distributed.gather_rate_logs(exp)
        assert [r["count"] for r in records] == [6]
        assert exp.write_result is True
        assert set(exp.extra_timings) == {"train_0"}
        assert exp.extra_timings["train_0"] == log.record()
    finally:
        distributed.shutdown()
    assert not distributed.is_initialized()


@pytest.mark.parametrize("rank", [None, "0", "1"])
def test_unknown_arch_is_a_bad_argument(monkeypatch, rank):
    """Rejected before joining any group; only rank 0 (or a plain run) would write it."""
    from milabench.models import scaling

    for var in TORCHRUN_VARS:
        monkeypatch.delenv(var, raising=False)
    if rank is not None:
        monkeypatch.setenv("RANK", rank)
    exp = Experiment("scaling")
    with pytest.raises(BadTestArguments, match="not a torchvision classification model"):
        scaling.main(exp, ["--arch", "nonet", "--max-count", "8"])
    assert exp.write_result is (rank != "1")
