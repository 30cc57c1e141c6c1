"""The scaling test: DDP training of a torchvision network, plain and under torchrun (CPU).

Real subprocesses: ``milarun run`` alone (world size 1) and ``python -m torch.distributed.run
--nproc-per-node 2`` with gloo on CPU. Small network (resnet18 on 32 px, batch 8) so that each
run trains for a few seconds on one core per rank.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from milarun.experiment import BadTestArguments, Experiment, RateLog
from modelrun import describe, run_trained

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--arch", "resnet18", "--image-size", "32", "--batch-size", "8"]
# Runs are as long as 6 slices of 0.5 s of training, however fast this machine is.
SLICES = 6
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "ROLE_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def cpu_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env.pop("OMP_NUM_THREADS", None)
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", MILARUN_DEVICE="cpu:0",
               PYTHONPATH=str(ROOT))
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_results(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


# -- world size 1, no torchrun ---------------------------------------------------------------
def test_single_process_run(tmp_path):
    result = run_trained("scaling", None, tmp_path, [*SMALL, "--min-slices", str(SLICES)],
                         env={"MILARUN_DEVICE": "cpu:0"})
    assert result["metrics"]["world_size"] == 1
    assert result["timings"]["train"]["count"] % 8 == 0  # whole batches of 8
    assert "train_0" not in result["timings"]  # no process group, no per-rank records
    assert result["call"]["arguments"]["arch"] == "resnet18"


# -- two ranks under torchrun (gloo) ---------------------------------------------------------
@pytest.fixture(scope="module")
def torchrun_two(tmp_path_factory):
    out = tmp_path_factory.mktemp("scaling2")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", str(free_port()),
         "-m", "milarun", "run", "milabench.models.scaling:main",
         "--experiment-name", "quick.scaling.2", "-o", str(out),
         "--", *SMALL, "--min-slices", str(SLICES)],
        cwd=ROOT, env=cpu_env(), capture_output=True, text=True, timeout=240,
    )
    return done, out


def test_torchrun_two_ranks_train(torchrun_two):
    """Independent of the runner's support: both ranks train in one DDP group and succeed."""
    done, out = torchrun_two
    assert done.returncode == 0, describe(done)
    written = load_results(out)
    assert written, describe(done)
    for result in written:
        assert result["success"], result["error"]
        assert result["name"] == "quick.scaling.2"
        assert result["metrics"]["world_size"] == 2


def test_torchrun_rank0_writes_one_result_with_every_rank(torchrun_two):
    done, out = torchrun_two
    assert done.returncode == 0, describe(done)
    written = sorted(out.glob("*.json"))
    assert len(written) == 1, [p.name for p in written]
    assert written[0].name.startswith("quick.scaling.2.J0.")
    result = json.loads(written[0].read_text())
    assert result["success"], result["error"]
    timings = result["timings"]
    assert {"train", "train_0", "train_1"} <= set(timings)
    assert timings["train_0"]["rates"] == timings["train"]["rates"]  # rank 0 is the writer
    # Each rank judges its own slices, yet both stopped after the same step (the stop is
    # agreed): a rank that went on alone would have hung in DDP's all-reduce.
    assert timings["train_0"]["count"] == timings["train_1"]["count"] > 0
    for rank in (0, 1):
        record = timings[f"train_{rank}"]
        assert record["type"] == "rate"
        assert len(record["rates"]) >= SLICES


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
