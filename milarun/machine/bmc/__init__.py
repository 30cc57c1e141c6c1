"""The node's power from its BMC (Redfish through sushy, IPMI through pyghmi), sampled beside
the GPU monitor: ``node_monitor()`` gives a milarun.machine.monitors.Monitor whose samples hold
``{"bmc": {"power": W[, "energy": J]}, "time": wall clock}``; milarun.measure.nodepower turns
them into the steady window's node energy. Configured in one place: milarun.machine.bmc.config.
"""

from __future__ import annotations

import os
import time
from typing import Any

from milarun.machine.bmc.config import BmcConfig, BmcConfigError, load_config
from milarun.machine.monitors import Monitor

__all__ = ["BmcConfig", "BmcConfigError", "load_config", "node_monitor", "reader"]

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

    def probe() -> dict[str, Any]:
        asked = time.time()
        reading = read.read()
        # the middle of the request: a BMC may take a good part of a second to answer
        return {"bmc": reading, "time": (asked + time.time()) / 2, "source": read.source}

    monitor = Monitor(probe, found.interval)
    monitor.backend = found.describe()
    return monitor
