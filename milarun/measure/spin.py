"""The calibration workload's step: a busy-wait of known length.

It lives in the harness because ``milarun selftest`` measures the harness on it, and the
calibration test (a model) runs the same steps; the harness never imports a model.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def spin(duration: float, clock: Callable[[], float] = time.perf_counter) -> float:
    """Busy-wait for ``duration`` seconds (sleep would add scheduler jitter); returns the
    time the spin really took."""
    start = clock()
    deadline = start + duration
    now = start
    while now < deadline:
        now = clock()
    return now - start
