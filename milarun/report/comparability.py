"""Is a comparison like with like? The one table of how each test relates to the 2020 legacy
baselines (mila-ao-2020-2), and the verdict per test that `report --compare` shows.

``yes``: the same workload in the same unit. ``approx``: the same workload with a known
difference (the note says which, in one phrase). ``no``: a different workload; its ratio is
shown but left out of the compared score. Against a baseline that milarun itself measured
(a summary with per-run rates, or a results folder) every shared test is ``yes``.
Update a row whenever a test's workload or unit changes.
"""

from __future__ import annotations

from typing import Any

YES, APPROX, NO = "yes", "approx", "no"
# The legacy fake ImageNet had 100,000 training images: a smaller set drains the DataLoader
# at every epoch end (3 batches of 256 for 1,000 images), so those tests are approx on it.
LEGACY_IMAGENET_SIZE = 100_000
FAKE_IMAGENET_TESTS = {"loader", "fast_style", "dcgan", "convnet", "convnet_fp16"}

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


def is_legacy(baseline: dict[str, dict[str, Any]]) -> bool:
    """A summary written by the legacy milarun: no entry has the per-run rates that
    milarun's own summaries add."""
    return not any(isinstance(entry, dict) and "rates" in entry for entry in baseline.values())


def legacy_name(key: str) -> str:
    """``standard.scaling.3`` -> ``scaling``; ``standard.vae`` -> ``vae``."""
    name = key.split(".", 1)[1] if "." in key else key
    return name.split(".", 1)[0]


def judge(key: str, legacy: bool, dataset: dict[str, Any] | None = None) -> tuple[str, str | None]:
    """The verdict and its reason for one test key against a baseline; ``dataset`` is the
    data the runs read (the summary's ``dataset``: name, smallest size, synthetic)."""
    if not legacy:
        return YES, None
    name = legacy_name(key)
    verdict, note = LEGACY.get(name, NOT_IN_LEGACY)
    size = (dataset or {}).get("size")
    if name in FAKE_IMAGENET_TESTS and not (size and size >= LEGACY_IMAGENET_SIZE):
        small = f"fake ImageNet of {size:,} images" if size else "fake ImageNet of unknown size"
        note = "; ".join(n for n in (f"{small} (legacy: 100,000)", note) if n)
        verdict = APPROX if verdict == YES else verdict
    return verdict, note
