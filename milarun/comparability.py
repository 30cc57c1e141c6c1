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
NO_ITEM = "no per-step loss.item() sync"
FAKE_IMAGENET = "fake ImageNet of 1,000 images at JPEG q90 (legacy: 100,000 at q75)"

# Legacy test name -> (verdict, why), as of this version of the suite.
LEGACY: dict[str, tuple[str, str | None]] = {
    "toy_reg": (APPROX, f"inputs made on the device (legacy: CPU, copied); {NO_ITEM}"),
    "toy_lstm": (APPROX, f"{NO_ITEM}"),
    "vae": (APPROX, f"up to 8 loader workers (legacy: 1); {NO_ITEM}"),
    "loader": (APPROX, FAKE_IMAGENET),
    "reso": (APPROX, NO_ITEM),
    "fast_style": (APPROX, f"{FAKE_IMAGENET}; {NO_ITEM}"),
    "dcgan": (APPROX, f"{FAKE_IMAGENET}; cudnn.benchmark off"),
    "convnet": (APPROX, f"{FAKE_IMAGENET}; {NO_ITEM}"),
    "convnet_fp16": (APPROX, f"torch.autocast fp16 vs apex; {FAKE_IMAGENET}"),
    "wlm": (APPROX, NO_ITEM),
    "wlmfp16": (APPROX, f"torch.autocast fp16 vs apex; {NO_ITEM}"),
    "cart": (APPROX, "CartPole-v1 with dropout (legacy: v0, no dropout)"),
    "scaling": (YES, None),
    "translator": (NO, "no length bucketing: ~1.5-2x the LSTM steps per pair"),
    "ssd": (NO, "SSD300-VGG16 (legacy: MLPerf SSD-ResNet34)"),
    "minigrid": (NO, "small conv+GRU ignoring the mission, 16 envs (legacy: FiLM, 64 envs)"),
    "atari": (NO, "envs stepped serially, other CNN and lr (legacy: 16 env processes)"),
    "recom": (NO, "negatives drawn on the GPU (legacy: CPU dataset, 8 workers)"),
}
NOT_IN_LEGACY = (NO, "not in the 2020 suite")


def is_legacy(baseline: dict[str, dict[str, Any]]) -> bool:
    """A summary written by the legacy milarun: no entry has the per-run rates that
    milarun's own summaries add."""
    return not any(isinstance(entry, dict) and "rates" in entry for entry in baseline.values())


def legacy_name(key: str) -> str:
    """``standard.scaling.3`` -> ``scaling``; ``standard.vae`` -> ``vae``."""
    name = key.split(".", 1)[1] if "." in key else key
    return name.split(".", 1)[0]


def judge(key: str, legacy: bool) -> tuple[str, str | None]:
    """The verdict and its reason for one test key against a baseline."""
    if not legacy:
        return YES, None
    return LEGACY.get(legacy_name(key), NOT_IN_LEGACY)
