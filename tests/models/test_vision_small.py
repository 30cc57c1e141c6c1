"""MNIST and BSDS500 (synthesized, read back by their loaders) and the vae and reso tests.

The models run through the real ``milarun run`` CLI on tiny synthetic data, with one torch
thread (like one CPU slice; two threads fighting other processes on a 2-core machine are
several times slower and make the durations unpredictable).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from milabench import datasets, helpers
from milabench.datasets import bsds500, mnist
from modelrun import assert_rejected, run_trained, run_without_data

MNIST_SIZE = 1200
BSDS_SIZE = 16
# 1200 images at batch 64: 18 full batches and one of 48 per epoch, counted as they are.
VAE_ARGS = ["--batch-size", "64", "--workers", "0", "--min-slices", "6"]
# 16 images at batch 6: 6, 6 and 4 per epoch, each counted 6 (the legacy set_count); one
# worker, forked at each epoch.
RESO_ARGS = ["--batch-size", "6", "--crop-size", "32", "--workers", "1", "--min-slices", "6"]


# Every test here on one worker, in a row: the data below is synthesized once.
pytestmark = pytest.mark.xdist_group(name="vision_small")


@pytest.fixture(scope="module")
def dataroot(tmp_path_factory) -> Path:
    """Both datasets, tiny, synthesized once for this module."""
    root = tmp_path_factory.mktemp("vision-data")
    mnist.synthesize(root, MNIST_SIZE, seed=0, workers=2)
    bsds500.synthesize(root, BSDS_SIZE, seed=0, workers=2)
    return root


# -- MNIST ------------------------------------------------------------------------------------
def test_mnist_layout_and_idx_headers(dataroot):
    raw = dataroot / "MNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(mnist.RESOURCES)
    for prefix, count in (("train", MNIST_SIZE), ("t10k", MNIST_SIZE // 6)):
        images = (raw / f"{prefix}-images-idx3-ubyte").read_bytes()
        assert struct.unpack(">4i", images[:16]) == (2051, count, 28, 28)
        assert len(images) == 16 + count * 28 * 28
        labels = (raw / f"{prefix}-labels-idx1-ubyte").read_bytes()
        assert struct.unpack(">2i", labels[:8]) == (2049, count)
        assert len(labels) == 8 + count and max(labels[8:]) <= 9
    assert datasets.is_synthetic(mnist.folder(dataroot)) is True


def test_mnist_read_back_by_torchvision(dataroot):
    import torch
    from torchvision.datasets import MNIST
    from torchvision.transforms import ToTensor

    train = mnist.train_set(dataroot, transform=ToTensor())
    assert len(train) == MNIST_SIZE
    image, label = train[0]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32
    assert 0 <= float(image.min()) and float(image.max()) <= 1
    assert set(train.targets.tolist()) == set(range(10))  # every digit is there
    assert 0.05 < float(train.data.float().mean()) / 255 < 0.4  # strokes on a dark ground
    assert len(MNIST(str(dataroot), train=False)) == MNIST_SIZE // 6
    assert not (dataroot / "MNIST" / "processed").exists()


# -- BSDS500 ----------------------------------------------------------------------------------
def test_bsds500_layout(dataroot):
    from PIL import Image

    for split, count in (("train", BSDS_SIZE), ("val", 1), ("test", 1)):
        files = bsds500.image_files(dataroot, split)
        assert len(files) == count
        assert files[0].parent == dataroot / "BSR/BSDS500/data/images" / split
        for path in files:
            assert len(path.stem) == 6 and path.stem.isdigit() and path.suffix == ".jpg"
            with Image.open(path) as image:
                assert image.format == "JPEG" and image.mode == "RGB"
                assert image.size in ((481, 321), (321, 481))
    assert datasets.is_synthetic(bsds500.folder(dataroot)) is True


def test_bsds500_super_resolution_pairs(dataroot):
    import torch

    pairs = bsds500.reso_train_set(dataroot)
    assert len(pairs) == BSDS_SIZE
    source, target = pairs[0]
    assert source.shape == (1, 128, 128) and target.shape == (1, 256, 256)
    for t in (source, target):
        assert t.dtype == torch.float32 and 0 <= float(t.min()) and float(t.max()) <= 1
    assert float(target.std()) > 0.02  # there is detail to recover
    # The input is the target down-scaled: their averages agree.
    assert abs(float(source.mean()) - float(target.mean())) < 0.02
    source, target = bsds500.reso_train_set(dataroot, crop_size=65, upscale_factor=3)[1]
    assert source.shape == (1, 21, 21) and target.shape == (1, 63, 63)


def test_bsds500_pairs_are_made_where_the_workers_fork_from(dataroot):
    """reso forks its loader workers anew at every epoch, as the legacy did: the modules an
    item needs are imported by the process that makes the set, so a fresh worker starts
    with them (else each epoch's fresh workers would import torchvision again)."""
    import subprocess
    import sys

    code = (
        "import sys; from milabench.datasets import bsds500; "
        f"bsds500.reso_train_set({str(dataroot)!r}); "
        "print('torchvision.transforms.functional' in sys.modules, 'PIL.Image' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["True", "True"], done.stderr


def test_bsds500_loader_skips_other_files(dataroot):
    thumbs = bsds500.images_folder(dataroot, "train") / "Thumbs.db"  # as in the real archive
    thumbs.write_bytes(b"not an image")
    try:
        assert len(bsds500.reso_train_set(dataroot)) == BSDS_SIZE
    finally:
        thumbs.unlink()


# -- the legacy loaders -----------------------------------------------------------------------
class Pids:
    """Items that say which process loaded them."""

    def __len__(self) -> int:
        return 5

    def __getitem__(self, index: int) -> int:
        return os.getpid()


def two_epochs(loader) -> list[list[int]]:
    batches = helpers.endless(loader)
    return [next(batches).tolist() for _ in range(2 * len(loader))]


def test_legacy_epochs_fork_their_workers_anew_and_keep_the_partial_batch():
    """The 2020 loaders (reso, vae): a plain DataLoader cycled over, every epoch new worker
    processes and a last, partial batch; milarun's own: the same workers, full batches."""
    legacy = two_epochs(helpers.data_loader(Pids(), 2, 1, legacy_epochs=True))
    assert [len(b) for b in legacy] == [2, 2, 1, 2, 2, 1]
    first, second = {p for b in legacy[:3] for p in b}, {p for b in legacy[3:] for p in b}
    assert len(first) == len(second) == 1 and first != second and os.getpid() not in first
    kept = two_epochs(helpers.data_loader(Pids(), 2, 1))
    assert [len(b) for b in kept] == [2, 2, 2, 2]
    assert len({p for b in kept for p in b}) == 1


@pytest.mark.parametrize("model", ["vae", "reso"])
def test_the_model_loads_as_its_legacy(monkeypatch, dataroot, model):
    import importlib

    import torch

    from milarun.measure.experiment import Experiment

    asked = []

    class Asked(Exception):
        pass

    def data_loader(*args, **kwargs):
        asked.append(kwargs)
        raise Asked

    monkeypatch.setattr(helpers, "data_loader", data_loader)
    main = importlib.import_module(f"milabench.models.{model}").main
    exp = Experiment(model, dataroot=dataroot, device=torch.device("cpu"))
    with pytest.raises(Asked):
        main(exp, ["--workers", "1"])
    assert asked[0]["legacy_epochs"] is True


# -- the models -------------------------------------------------------------------------------
@pytest.mark.slow
def test_vae_counts_the_images_of_each_batch(tmp_path, dataroot):
    result = run_trained("vae", dataroot, tmp_path, VAE_ARGS)
    train = result["timings"]["train"]
    epochs, steps = divmod(train["blocks"], 19)  # 18 batches of 64, then one of 48
    assert train["count"] == epochs * MNIST_SIZE + steps * 64


@pytest.mark.slow
def test_reso_counts_a_whole_batch_each_step(tmp_path, dataroot):
    result = run_trained("reso", dataroot, tmp_path, RESO_ARGS)
    train = result["timings"]["train"]
    assert train["count"] == 6 * train["blocks"]
    assert result["metrics"]["per_example.images"] == pytest.approx(BSDS_SIZE / 18)


@pytest.mark.slow  # its CLI path: test_missing_data.py says which fast test has it
@pytest.mark.parametrize("model", ["vae", "reso"])
def test_model_without_data_fails_at_once(tmp_path, model):
    run_without_data(model, tmp_path)


@pytest.mark.parametrize(
    "model, argv, message",
    [
        ("reso", ["--crop-size", "400"], "--crop-size 400"),
        ("reso", ["--upscale-factor", "0"], "--upscale-factor 0"),
        ("reso", ["--batch-size", "0"], "--batch-size: 0"),
        ("vae", ["--batch-size", "0"], "--batch-size: 0"),
    ],
)
def test_bad_arguments(model, argv, message):
    assert_rejected(model, argv, message)
