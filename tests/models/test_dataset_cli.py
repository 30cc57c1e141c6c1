"""Every dataset's contract (synthesis deterministic for a seed, finished data never replaced,
missing data names the command) and `milarun dataset` through the CLI."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import milarun
from milabench import datasets
from milabench.datasets import bsds500, coco, fake_imagenet, ml20m, mnist, wiki2, wmt16

# Each dataset's training examples as its loader counts them (on an empty folder the loader
# must fail with the command that makes the data), and a size that synthesises in seconds
# yet gives each of 2 workers several chunks (wiki2: 3 articles of 3,500 tokens).
COUNT: dict[str, Callable[[Path], int]] = {
    "bsds500": lambda root: len(bsds500.reso_train_set(root, 64)),
    "coco": lambda root: len(coco.detection_train_set(root)),
    "fake_imagenet": lambda root: len(fake_imagenet.image_folder(root)),
    "ml20m": lambda root: ml20m.train_set(root).nb_users,
    "mnist": lambda root: len(mnist.train_set(root)),
    "wiki2": lambda root: len(wiki2.corpus(root).train),
    "wmt16": lambda root: len(wmt16.train_set(root, max_length=1000)),
}
SIZE = {
    "bsds500": 4,
    "coco": 8,
    "fake_imagenet": 16,
    "ml20m": 25,
    "mnist": 60,
    "wiki2": 9000,
    "wmt16": 30,
}


def digest(folder):
    """Hash of every file's relative path and bytes (the marker excluded)."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.name != datasets.MARKER:
            h.update(str(path.relative_to(folder)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("name", sorted(COUNT))
def test_synthetic_data_contract(tmp_path, name):
    module, size, count = datasets.resolve(name), SIZE[name], COUNT[name]
    with pytest.raises(datasets.DataMissing, match=f"`milarun dataset {name} "):
        count(tmp_path / "a")
    one = module.synthesize(tmp_path / "a", size, seed=3, workers=1)
    two = module.synthesize(tmp_path / "b", size, seed=3, workers=2)  # another split of work
    other = module.synthesize(tmp_path / "c", size, seed=4, workers=1)
    before = digest(one)
    assert before == digest(two) and before != digest(other)
    assert count(tmp_path / "a") == size
    assert datasets.is_synthetic(one) is True
    # what every result that reads it records
    assert datasets.summary(one, tmp_path / "a") == {"name": name, "size": size, "synthetic": True}
    # Finished data is kept: a smaller request is satisfied, a bigger one refused.
    assert module.synthesize(tmp_path / "a", size // 2, seed=9) == one
    with pytest.raises(datasets.DataMissing, match=f"already holds {size} synthetic examples"):
        module.synthesize(tmp_path / "a", 2 * size, seed=3)
    assert digest(one) == before
    with pytest.raises(ValueError, match=f"{name}: size 0"):
        module.synthesize(tmp_path / "d", 0)


def test_real_data_summary(tmp_path):
    """Real data records its own size (ml20m counts users); no marker, no summary."""
    assert datasets.summary(mnist.folder(tmp_path), tmp_path) is None
    datasets.mark_complete(mnist.folder(tmp_path), False, size=60_000)
    datasets.mark_complete(ml20m.folder(tmp_path), False, users=138_493, items=26_744)
    assert datasets.summary(mnist.folder(tmp_path), tmp_path) == {
        "name": "mnist",
        "size": 60_000,
        "synthetic": False,
    }
    assert datasets.summary(ml20m.folder(tmp_path), tmp_path) == {
        "name": "ml20m",
        "size": 138_493,
        "synthetic": False,
    }


def test_dataset_command_makes_every_dataset(tmp_path):
    """Short and full names, --size, --seed and --workers reach every dataset."""
    names = sorted(COUNT)
    specs = [f"milabench.datasets:{names[0]}", *names[1:]]
    done = milarun(
        "dataset",
        *specs,
        "--synthetic",
        "--size",
        "12",
        "--seed",
        "5",
        "--workers",
        "2",
        "-d",
        tmp_path / "cli",
    )
    assert done.returncode == 0, done.stderr
    for spec, name in zip(specs, names):
        assert f"{spec}: 12 synthetic examples in " in done.stdout
        assert COUNT[name](tmp_path / "cli") == 12
    here = fake_imagenet.synthesize(tmp_path / "here", 12, seed=5)
    assert digest(here) == digest(fake_imagenet.folder(tmp_path / "cli"))


def test_existing_data_is_never_replaced(tmp_path):
    args = ("dataset", "fake_imagenet", "--synthetic", "-d", tmp_path)
    assert milarun(*args, "--size", "10").returncode == 0
    before = digest(tmp_path / "ImageNet")
    smaller = milarun(*args, "--size", "5")  # a smaller request is already satisfied
    assert smaller.returncode == 0 and "10 synthetic examples" in smaller.stdout
    bigger = milarun(*args, "--size", "30")
    assert bigger.returncode == 1
    assert "already holds 10 synthetic examples" in bigger.stderr
    assert "Traceback" not in bigger.stderr
    assert digest(tmp_path / "ImageNet") == before


def test_bad_dataset_calls(tmp_path):
    unknown = milarun("dataset", "imagenet21k", "--synthetic", "-d", tmp_path)
    assert unknown.returncode == 1 and "unknown dataset 'imagenet21k'" in unknown.stderr
    assert "fake_imagenet" in unknown.stderr  # lists the known ones
    size = milarun("dataset", "fake_imagenet", "--size", "10", "-d", tmp_path)
    assert size.returncode == 1 and "--size only applies to --synthetic" in size.stderr
