"""What the probe children share (imported by milarun.doctor.active.probe and the measuring
modules it runs): the levels, the timed samples and the output file rewritten after every phase."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from milarun import results

# How long one sample of a measurement takes, and how many samples each gives (a CI needs
# several), per level. The sample count is fixed; each sample's work is calibrated to its time.
LEVELS: dict[str, dict[str, float]] = {
    # p2p: per GPU pair (28 pairs on 8 GPUs): quick one way, full both ways
    "quick": {
        "samples": 8,
        "seconds": 0.25,
        "pattern_share": 0.5,
        "pattern_rounds": 1,
        "p2p_samples": 5,
        "p2p_seconds": 0.0625,
        "p2p_both_ways": 0,
        "link_samples": 5,  # host link: one GPU at a time, so short in quick
        "link_seconds": 0.0625,
    },
    "full": {
        "samples": 15,
        "seconds": 1.0,
        "pattern_share": 0.9,
        "pattern_rounds": 2,
        "p2p_samples": 8,
        "p2p_seconds": 0.25,
        "p2p_both_ways": 1,
        "link_samples": 15,
        "link_seconds": 0.5,
    },
}

MIN_SAMPLES = 3  # a CI and a t-test need a few, however slow the device


def sample_seconds(
    op: Callable[[], Any], sync: Callable[[], Any], samples: int, seconds: float
) -> list[float]:
    """Seconds per ``op`` in each of ``samples`` samples of about ``seconds`` each (the
    repetitions per sample calibrated on warm-up bursts); past 3x the planned time it stops at
    MIN_SAMPLES (a starved device still gets a CI and a test; the parent's timeout bounds it)."""
    op()
    sync()
    reps, spent = 1, 0.0
    while reps < 2**24:  # double until a burst lasts a quarter of a sample
        start = time.perf_counter()
        for _ in range(reps):
            op()
        sync()
        spent = time.perf_counter() - start
        if spent >= seconds / 4:
            break
        reps *= 2
    reps = max(1, round(reps * seconds / max(spent, 1e-9)))
    found: list[float] = []
    deadline = time.perf_counter() + 3 * samples * seconds
    while len(found) < samples and (len(found) < MIN_SAMPLES or time.perf_counter() < deadline):
        start = time.perf_counter()
        for _ in range(reps):
            op()
        sync()
        found.append((time.perf_counter() - start) / reps)
    return found


BARRIER_WAIT = 600.0  # seconds a child waits for its siblings at a phase, then goes on alone
GONE = "gone"  # the parent's mark in the barrier folder of a child that ended


class Recorder:
    """The output file, rewritten after each phase. With a ``barrier`` (a folder, and how
    many siblings share it), each phase starts when every sibling has reached it: devices
    are compared on the same work at the same time (the same power, heat and memory traffic
    around them). A sibling that ended (the parent marks it ``gone.<name>``: it crashed or
    was killed) is not waited for; past BARRIER_WAIT a child stops waiting."""

    def __init__(self, path: Path, kind: str, barrier: tuple[str, int, str] | None = None) -> None:
        self.path = path
        self.barrier = barrier
        self.data: dict[str, Any] = {"kind": kind, "phase": None, "done": False, "phases": {}}
        self.save()

    def save(self) -> None:
        results.write_atomic(self.path, self.data, replace=True)

    def _meet(self, name: str) -> None:
        if self.barrier is None:
            return
        folder, count, me = self.barrier
        Path(folder, f"{name}.{me}").touch()
        deadline = time.monotonic() + BARRIER_WAIT
        while len({p.suffix for p in Path(folder).iterdir() if p.stem in (name, GONE)}) < count:
            if time.monotonic() > deadline:
                self.barrier = None  # a sibling is gone: no more waiting for it
                return
            time.sleep(0.01)

    def phase(self, name: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        self.data["phase"] = name
        self.save()
        self._meet(name)
        try:
            found = measure()
        except Exception as err:  # a CUDA error, an allocation failure: this phase's FAIL
            found = {
                "error": f"{type(err).__name__}: {err}".strip()[:500],
                "trace": traceback.format_exc(limit=4)[-1500:],
            }
        self.data["phases"][name] = found
        self.save()
        return found

    def finish(self) -> None:
        self.data["phase"] = None
        self.data["done"] = True
        self.save()
