"""The torch side of an instance's device (milarun/machine/torchdevice.py): which torch.device
it trains on, and a torchrun rank's CUDA opened on its own GPU only, with a fake torch.cuda
(this machine may have no GPU)."""

from __future__ import annotations

import os

import pytest

from milarun.machine import torchdevice


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("CUDA_VISIBLE_DEVICES", "MILARUN_DEVICE", "LOCAL_RANK", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


# -- torch_device --------------------------------------------------------------------------
def torch_seeing_gpus(env: pytest.MonkeyPatch, count: int):
    """torch, made to see ``count`` GPUs (this machine may have none); returns it."""
    torch = pytest.importorskip("torch")
    env.setattr(torch.cuda, "is_available", lambda: count > 0)
    env.setattr(torch.cuda, "device_count", lambda: count)
    return torch


def test_torch_device_cpu_slice_never_uses_gpu(clean_env):
    torch = torch_seeing_gpus(clean_env, 1)
    clean_env.setenv("MILARUN_DEVICE", "cpu:1")
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "")
    assert torchdevice.torch_device() == torch.device("cpu")


def test_torch_device_gpu_instance(clean_env):
    torch = torch_seeing_gpus(clean_env, 1)
    clean_env.setenv("MILARUN_DEVICE", "cuda")
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert torchdevice.torch_device() == torch.device("cuda", 0)  # the only visible GPU
    torch_seeing_gpus(clean_env, 0)
    with pytest.raises(RuntimeError, match="torch sees no GPU"):
        torchdevice.torch_device()  # a GPU instance never silently trains on the CPU


def test_torch_device_plain_run_on_gpu_machine_uses_gpu(clean_env):
    torch_seeing_gpus(clean_env, 1)
    assert torchdevice.torch_device().type == "cuda"


class FakeCuda:
    """torch.cuda as a torchrun rank finds it: CUDA reads CUDA_VISIBLE_DEVICES once, when
    it initialises; the count it gives from then on is of what it saw."""

    def __init__(self, initialized: bool = False, fails: bool = False):
        self.initialized, self.fails = initialized, fails
        self.saw: str | None = None

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self) -> None:
        if self.fails:
            raise RuntimeError("Found no NVIDIA driver on your system")
        self.initialized = True
        self.saw = os.environ.get("CUDA_VISIBLE_DEVICES")

    def device_count(self) -> int:
        return len(self.saw.split(",")) if self.saw is not None else 0

    def is_available(self) -> bool:
        return self.device_count() > 0


def test_torchrun_rank_opens_cuda_on_its_own_gpu_only(clean_env):
    """As the legacy scaling launcher's CUDA_VISIBLE_DEVICES=<i> per rank: rank 1 of GPUs
    4,5 opens CUDA seeing GPU 5 alone (cuda:0), and the variable is the instance's again
    after, for the harness's records and monitors."""
    torch = pytest.importorskip("torch")
    fake = FakeCuda()
    clean_env.setattr(torch, "cuda", fake)
    clean_env.setenv("MILARUN_DEVICE", "cuda:4,cuda:5")
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "GPU-4444,GPU-5555")
    clean_env.setenv("LOCAL_RANK", "1")
    assert torchdevice.torch_device() == torch.device("cuda", 0)
    assert fake.saw == "GPU-5555" and fake.device_count() == 1
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-4444,GPU-5555"


def test_torchrun_rank_on_an_opened_cuda_uses_its_local_gpu(clean_env):
    torch = pytest.importorskip("torch")
    fake = FakeCuda(initialized=True)
    fake.saw = "4,5"  # opened before: it sees both
    clean_env.setattr(torch, "cuda", fake)
    clean_env.setenv("MILARUN_DEVICE", "cuda")
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    clean_env.setenv("LOCAL_RANK", "1")
    assert torchdevice.torch_device() == torch.device("cuda", 1)
    clean_env.setenv("LOCAL_RANK", "2")
    with pytest.raises(RuntimeError, match="LOCAL_RANK=2 has no GPU"):
        torchdevice.torch_device()


def test_open_own_gpu_without_a_list_or_a_gpu(clean_env):
    fake = FakeCuda()
    assert torchdevice.open_own_gpu(fake, 3)  # no CUDA_VISIBLE_DEVICES: CUDA's index 3
    assert fake.saw == "3" and "CUDA_VISIBLE_DEVICES" not in os.environ
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    fake = FakeCuda()
    assert not torchdevice.open_own_gpu(fake, 2)  # no entry of its own: nothing opened
    assert fake.saw is None and os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
    fake = FakeCuda(fails=True)
    assert not torchdevice.open_own_gpu(fake, 1)  # no driver: torch_device says so
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
