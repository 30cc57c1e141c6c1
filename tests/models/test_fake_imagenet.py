"""fake ImageNet as the legacy suite made it (100,000 + 5,000 + 5,000 noise JPEGs of 512 px at
quality 75), and a generation killed half-way: refused by the loader, then completed by the
same command into exactly the bytes of an uninterrupted one."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from conftest import ROOT, cli_env, milarun
from milabench import datasets
from milabench.datasets import fake_imagenet
from modelrun import tree_bytes

SIZE, SEED = 1000, 7  # 1,100 images of 512 px: seconds to write, far more than a kill takes


def test_legacy_defaults():
    assert fake_imagenet.DEFAULT_SIZE == 100_000
    assert fake_imagenet.split_sizes(100_000) == {"train": 100_000, "val": 5_000, "test": 5_000}
    # smaller sets keep 5% for val and test, never an empty split
    assert fake_imagenet.split_sizes(256) == {"train": 256, "val": 13, "test": 13}
    assert fake_imagenet.split_sizes(3) == {"train": 3, "val": 1, "test": 1}
    assert (fake_imagenet.IMAGE_SIZE, fake_imagenet.CLASSES) == (512, 1000)


def test_images_are_legacy_noise_jpegs(tmp_path):
    base = fake_imagenet.synthesize(tmp_path, 2, seed=0)
    files = sorted(base.rglob("*.jpeg"))
    assert [f.relative_to(base).parts[0] for f in files].count("train") == 2 and len(files) == 4
    reference = io.BytesIO()
    Image.new("RGB", (8, 8)).save(reference, format="JPEG")  # PIL's default quality: 75
    for path in files:
        split, label, name = path.relative_to(base).parts
        assert split in fake_imagenet.SPLITS and 0 <= int(label) < 1000
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.size == (512, 512)
            assert image.mode == "RGB"
            assert image.quantization == Image.open(reference).quantization
            reference.seek(0)
    info = datasets.marker(base)
    assert info == {"synthetic": True, "size": 2, "seed": 0, "image_size": 512, "classes": 1000}
    assert datasets.summary(base, tmp_path) == {
        "name": "fake_imagenet",
        "size": 2,
        "synthetic": True,
    }


def _generate(root: Path, *args: str) -> subprocess.Popen:
    """`milarun dataset fake_imagenet --synthetic` in its own process group."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "milarun",
            "dataset",
            "fake_imagenet",
            "--synthetic",
            "--size",
            str(SIZE),
            "--seed",
            str(SEED),
            "--workers",
            "2",
            "-d",
            str(root),
            *args,
        ],
        cwd=ROOT,
        env=cli_env(benches=False, keep_omp=True),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill_once_files_exist(process: subprocess.Popen, train: Path) -> None:
    """SIGKILL the generator itself as soon as it has written an image; its pool workers
    must end with it."""
    deadline = time.monotonic() + 120
    while not any(train.rglob("*.jpeg")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no image written in 120 s"
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    deadline = time.monotonic() + 30
    while True:  # the group is gone once every worker has died with its parent
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "pool workers outlived their killed parent"
        time.sleep(0.05)


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


@pytest.mark.slow
def test_interrupted_generation_is_refused_then_completed(tmp_path):
    root = tmp_path / "data"
    base = fake_imagenet.folder(root)
    _kill_once_files_exist(_generate(root), base / "train")

    # A half-written set is never used: the loader names the command that completes it.
    assert datasets.marker(base) is None
    command = f"milarun dataset fake_imagenet --synthetic --size {SIZE} --seed {SEED} -d {root}"
    with pytest.raises(datasets.DataMissing, match=f"incomplete .*`{re.escape(command)}`"):
        fake_imagenet.image_folder(root)
    kept = {p: p.stat().st_ino for p in base.rglob("*.jpeg")}
    assert 0 < len(kept) < SIZE * 1.1
    for path in kept:  # written atomically: every image there is whole
        with Image.open(path) as image:
            image.load()
    # a temporary file its killed writer left behind (this host, a dead process)
    stale = base / "train" / "0" / f".999999.jpeg.{socket.gethostname()}.{_dead_pid()}.tmp"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"\xff\xd8half")

    # Another request is refused (it would mix two sets); the same one completes it.
    other = milarun(
        "dataset", "fake_imagenet", "--synthetic", "--size", SIZE, "--seed", "8", "-d", root
    )
    assert other.returncode == 1
    assert f"interrupted generation of {SIZE} synthetic examples (seed {SEED})" in other.stderr
    resumed = _generate(root)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"fake_imagenet: {SIZE} synthetic examples in {base}" in out
    assert f"fake_imagenet: {int(SIZE * 1.1):,} images in " in err  # the closing line

    assert all(p.stat().st_ino == ino for p, ino in kept.items())  # kept, not rewritten
    assert not stale.exists() and not (base / datasets.PARTIAL).exists()
    assert len(fake_imagenet.image_folder(root)) == SIZE
    whole = fake_imagenet.synthesize(tmp_path / "whole", SIZE, seed=SEED, workers=1)
    assert tree_bytes(base) == tree_bytes(whole)  # markers included
