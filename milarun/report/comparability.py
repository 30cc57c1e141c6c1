"""Is a comparison like with like? The one table of how each test relates to the 2020 legacy
baselines (mila-ao-2020-2), and the verdict per test that `report --compare` shows.

``yes``: the same workload in the same unit, run as the legacy ran it. ``approx``: the same
workload with a known difference (the note says which, in a phrase each). ``no``: a
different workload; its ratio is shown but left out of the compared score. Against a
baseline that milarun itself measured (a summary with per-run rates, or a results folder)
every shared test is ``yes``.

A ``yes`` of the table is ``approx`` for runs made under other conditions than the legacy
figures, as their results record them (the summary's ``dataset``, ``tf32`` and ``nocache``,
see milarun.report.summary.conditions):

- data: a test that reads a data set on synthetic data where the legacy read the real one
  (MNIST, BSDS500, COCO, WikiText-2, WMT16, MovieLens-20M), or on a smaller set than the
  legacy's (fake ImageNet, itself generated, under 100,000 images: a small set drains the
  DataLoader at every epoch end), or on data its results do not name;
- TF32: on a GPU that runs TF32 (Ampere and later), fp32 work torch let run as TF32 (cuDNN
  convolutions and RNNs by default, matmuls where a test or the operator allowed it); the
  2020 V100s had no TF32;
- nocache: a test that reads a data set, run without nocache (the legacy profiles'
  ``exec_prefix``), so its data could come from the page cache rather than the disk, or
  with no record of it (results record it in ``isolation.nocache``).

Update a row whenever a test's workload or unit changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from milarun.report.summary_entry import SummaryEntry

YES, APPROX, NO = "yes", "approx", "no"

# Legacy test name -> (verdict, why), as of this version of the suite.
LEGACY: dict[str, tuple[str, str | None]] = {
    "toy_reg": (YES, None),
    "toy_lstm": (YES, None),
    "vae": (YES, None),
    "loader": (YES, None),
    "reso": (YES, None),
    "fast_style": (YES, None),
    "dcgan": (YES, None),
    "convnet": (YES, None),
    "convnet_fp16": (APPROX, "torch.autocast fp16 vs apex"),
    "wlm": (YES, None),
    "wlmfp16": (APPROX, "torch.autocast fp16 vs apex"),
    "ssd": (YES, None),
    "cart": (YES, None),
    "scaling": (YES, None),
    "translator": (YES, None),
    "minigrid": (
        APPROX,
        "64 env processes (legacy: 63 + 1 in the trainer); missions "
        "tokenised once each; no per-step .item() syncs",
    ),
    "atari": (
        APPROX,
        "ale-py emulator; grayscale before the frame max (legacy: atari-py, RGB max then OpenCV)",
    ),
    "recom": (APPROX, "positives looked up in a sorted array (legacy: scipy dok_matrix)"),
}
NOT_IN_LEGACY = (NO, "not in the 2020 suite")
NOT_IN_BASELINE = (NO, "not in the baseline")


class LegacyData(NamedTuple):
    """The data set a legacy test read: its milarun name, what a note calls it, the unit and
    size of the set the legacy read (None: not checked), and whether that set was itself
    generated (fake ImageNet), so that only its size matters."""

    name: str
    label: str
    unit: str
    size: int | None
    generated: bool = False
    synthetic: str | None = None  # what a synthetic set is made of, where it matters


MNIST = LegacyData("mnist", "MNIST", "images", 60_000)
BSDS500 = LegacyData("bsds500", "BSDS500", "images", 200)
# The legacy fake ImageNet had 100,000 training images: a smaller set drains the DataLoader
# at every epoch end (3 batches of 256 for 1,000 images).
FAKE_IMAGENET = LegacyData("fake_imagenet", "fake ImageNet", "images", 100_000, generated=True)
COCO = LegacyData("coco", "COCO 2017", "images", 118_287)
WIKI2 = LegacyData("wiki2", "WikiText-2", "tokens", 2_088_628)
WMT16 = LegacyData(
    "wmt16",
    "WMT16 en-de",
    "sentence pairs",
    None,
    synthetic="an invented language of about 19-20 tokens a side before BPE",
)
ML20M = LegacyData("ml20m", "MovieLens-20M", "users", 138_493)
# Legacy test name -> the data it read (milabench.datasets.READ_BY says the same by module).
LEGACY_DATA: dict[str, LegacyData] = {
    "vae": MNIST,
    "reso": BSDS500,
    **dict.fromkeys(("loader", "fast_style", "dcgan", "convnet", "convnet_fp16"), FAKE_IMAGENET),
    "ssd": COCO,
    "wlm": WIKI2,
    "wlmfp16": WIKI2,
    "translator": WMT16,
    "recom": ML20M,
}

# The tests whose fp32 work runs on cuDNN (convolutions, nn.LSTM/GRU): TF32 by default on
# Ampere and later. Matmuls are fp32 unless a test or the operator allows TF32; the fp16
# tests run their convolutions, RNNs and matmuls in fp16 (autocast), and loader has no model.
CUDNN_TESTS = {
    "reso",
    "fast_style",
    "dcgan",
    "convnet",
    "wlm",
    "ssd",
    "translator",
    "minigrid",
    "atari",
    "scaling",
}
NO_FP32_MATMULS = {"loader", "convnet_fp16", "wlmfp16"}


def is_legacy(baseline: dict[str, dict[str, Any]]) -> bool:
    """A summary written by the legacy milarun: no entry has the per-run rates that
    milarun's own summaries add."""
    return not any(isinstance(entry, dict) and "rates" in entry for entry in baseline.values())


def legacy_name(key: str) -> str:
    """``standard.scaling.3`` -> ``scaling``; ``standard.vae`` -> ``vae``."""
    name = key.split(".", 1)[1] if "." in key else key
    return name.split(".", 1)[0]


def data_note(name: str, dataset: Mapping[str, Any] | None) -> str | None:
    """How the data a test's runs read differs from the legacy's; None where it does not
    (or the test reads none)."""
    legacy = LEGACY_DATA.get(name)
    if legacy is None:
        return None
    size = (dataset or {}).get("size")
    amount = f" of {size:,} {legacy.unit}" if isinstance(size, (int, float)) else ""
    if not dataset:
        if legacy.generated:
            return f"{legacy.label} of unknown size (legacy: {legacy.size:,})"
        return f"{legacy.label} data not recorded (legacy: the real data)"
    if dataset.get("name") not in (None, legacy.name):
        return f"{dataset.get('name')} data (legacy: {legacy.label})"
    if not legacy.generated:  # the real data is the legacy's set, whatever its marker says
        if not dataset.get("synthetic"):
            return None
        real = f"the real {legacy.size:,}" if legacy.size else "the real data"
        made = f", {legacy.synthetic}" if legacy.synthetic else ""
        return f"synthetic {legacy.label}{amount}{made} (legacy: {real})"
    if not (size and legacy.size and size >= legacy.size):  # a generated set: its size
        if not amount:
            return f"{legacy.label} of unknown size (legacy: {legacy.size:,})"
        return f"{legacy.label}{amount} (legacy: {legacy.size:,})"
    return None


def tf32_note(name: str, tf32: Mapping[str, Any] | None) -> str | None:
    """Which of a test's fp32 work ran as TF32 (the summary's ``tf32``, recorded on devices
    that run it); None when none did."""
    if not tf32:
        return None
    work = []
    if tf32.get("cudnn") and name in CUDNN_TESTS:
        work.append("cuDNN convolutions/RNNs")
    if tf32.get("matmul") and name not in NO_FP32_MATMULS:
        work.append("matmuls")
    return f"fp32 {' and '.join(work)} as TF32 (legacy: no TF32)" if work else None


def nocache_note(name: str, nocache: Any) -> str | None:
    """A test that reads a data set, run without nocache (False) or with no record of it."""
    if nocache is True or name not in LEGACY_DATA:
        return None
    if nocache is False:
        return "without nocache: data read through the page cache (legacy: nocache)"
    return "nocache not recorded (legacy: nocache)"


def judge(key: str, legacy: bool, runs: Mapping[str, Any] | None = None) -> tuple[str, str | None]:
    """The verdict and its reason for one test key against a baseline; ``runs`` is what the
    runs recorded about their conditions (a summary entry: ``dataset``, ``tf32``,
    ``nocache``; summary.conditions)."""
    if not legacy:
        return YES, None
    name = legacy_name(key)
    verdict, note = LEGACY.get(name, NOT_IN_LEGACY)
    if verdict == NO:
        return verdict, note
    found = SummaryEntry.from_dict(runs) or SummaryEntry()
    notes = [
        data_note(name, found.dataset),
        note,
        tf32_note(name, found.tf32),
        nocache_note(name, found.nocache),
    ]
    differs = [n for n in notes if n]
    if not differs:
        return verdict, None
    return APPROX, "; ".join(differs)
