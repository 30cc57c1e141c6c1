"""The node's power from its BMC (Redfish through sushy, IPMI through pyghmi), sampled beside
the GPU monitor: ``node_monitor()`` gives a milarun.machine.monitors.Monitor whose samples hold
``{"bmc": {"power": W[, "energy": J]}, "time": wall clock}``; milarun.measure.nodepower turns
them into the steady window's node energy. Configured in one place: milarun.machine.bmc.config.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from milarun.machine.bmc.config import BmcConfig, BmcConfigError, load_config
from milarun.machine.monitors import Monitor

__all__ = ["BmcConfig", "BmcConfigError", "last_sample", "load_config", "node_monitor", "reader"]

NOT_CONFIGURED = "no BMC configured (docs/reports.md: Node energy)"


def reader(config: BmcConfig) -> Any:
    """The reader of a configuration's protocol (``read() -> {"power"[, "energy"]}``)."""
    if config.protocol == "ipmi":
        from milarun.machine.bmc.ipmi import IpmiReader

        return IpmiReader(config)
    from milarun.machine.bmc.redfish import RedfishReader

    return RedfishReader(config)


def node_monitor(config: BmcConfig | None | str = "load") -> Monitor:
    """A monitor of the node's power through its BMC; "no samples" with the reason where there
    is no BMC configured, the configuration is wrong, or this is not the rank that writes the
    result (one reader per job: a BMC answers slowly)."""
    try:
        found = load_config() if config == "load" else config
    except BmcConfigError as err:
        return Monitor(dict, unavailable=f"BMC configuration: {err}")
    if not isinstance(found, BmcConfig):
        return Monitor(dict, unavailable=NOT_CONFIGURED)
    if os.environ.get("RANK", "0") != "0":
        return Monitor(dict, found.interval, unavailable="read by rank 0 only")
    read = reader(found)
    one_at_a_time = threading.Lock()  # the reading after the run and the thread's own

    def probe() -> dict[str, Any]:
        with one_at_a_time:
            asked = time.time()
            reading = read.read()
            answered = time.time()
        # the middle of the request: a BMC may take a good part of a second to answer
        return {"bmc": reading, "time": (asked + answered) / 2, "source": read.source}

    return BmcMonitor(probe, found.interval, backend=found.describe(), timeout=found.timeout)


class BmcMonitor(Monitor):
    """A Monitor of the BMC, with the time one reading may take."""

    def __init__(self, *args: Any, timeout: float, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.timeout = timeout


def last_sample(monitor: Monitor) -> None:
    """One more reading after the run (so the readings bracket its window), waited for at
    most the configuration's timeout and a second: a BMC that stopped answering (a dead IPMI
    session takes pyghmi ~6 s) must not hold the result back."""
    if monitor.unavailable is not None:
        return
    reading = threading.Thread(target=monitor.sample, daemon=True, name="bmc-last")
    reading.start()
    timeout = monitor.timeout if isinstance(monitor, BmcMonitor) else 3.0
    reading.join(timeout + 1.0)
