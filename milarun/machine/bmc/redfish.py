"""Node power through Redfish (sushy): a chassis's EnvironmentMetrics (PowerWatts and, where
the BMC keeps one, the EnergykWh counter; Redfish 2020.4+) or its older Power resource
(PowerControl[0].PowerConsumedWatts)."""

from __future__ import annotations

import math
from typing import Any

from milarun.machine.bmc.config import BmcConfig

JOULES_PER_KWH = 3.6e6


class BmcReadError(RuntimeError):
    """A BMC that answered with something that is not a power reading."""


def _reading(value: Any, what: str) -> float:
    """A finite, non-negative number, else BmcReadError naming the field."""
    if isinstance(value, dict):
        value = value.get("Reading")
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0:
        raise BmcReadError(f"{what} is {value!r}, not a reading")
    return float(value)


def _link(doc: Any, key: str) -> str | None:
    found = doc.get(key) if isinstance(doc, dict) else None
    target = found.get("@odata.id") if isinstance(found, dict) else None
    return target if isinstance(target, str) else None


class RedfishReader:
    """Reads the node's power (W) and energy counter (J) from one chassis; connects on the
    first reading and again after a failure (a BMC that was reset)."""

    def __init__(self, config: BmcConfig):
        self.config = config
        self._conn: Any = None
        self._where: tuple[str, str] | None = None  # (kind, path) of the resource read
        self.source = "redfish"

    def _connect(self) -> None:
        import sushy  # type: ignore[import-untyped]
        from sushy import auth, connector

        timeout = self.config.timeout
        # one attempt per reading (sushy's default, 3 attempts 2 s apart, would hold the
        # monitor for seconds on a BMC that refuses): the next reading is the retry
        conn = connector.Connector(
            self.config.address.rstrip("/"),
            verify=True,
            server_side_retries=1,
            server_side_retries_delay=0.1,
            default_request_timeout=timeout,
            connect_timeout=timeout,
        )
        root = sushy.Sushy(
            self.config.address.rstrip("/"),
            auth=auth.BasicAuth(self.config.username, self.config.password),
            connector=conn,
            server_side_retries=1,
            server_side_retries_delay=0.1,
            read_timeout=timeout,
            connect_timeout=timeout,
        )
        paths = (
            [self.config.chassis]
            if self.config.chassis
            else list(root.get_chassis_collection().members_identities)
        )
        for path in paths:
            doc = conn.get(path).json()
            metrics, power = _link(doc, "EnvironmentMetrics"), _link(doc, "Power")
            if metrics is not None:
                self._where = ("EnvironmentMetrics", metrics)
            elif power is not None:
                self._where = ("Power", power)
            else:
                continue
            self._conn = conn
            self.source = f"redfish {path} {self._where[0]}"
            return
        raise BmcReadError(f"no chassis among {paths} has EnvironmentMetrics or Power")

    def read(self) -> dict[str, Any]:
        if self._conn is None:
            self._connect()
        assert self._where is not None
        kind, path = self._where
        try:
            doc = self._conn.get(path).json()
        except Exception:
            self._conn = None  # reconnect next time: the BMC may have been reset
            raise
        if not isinstance(doc, dict):
            raise BmcReadError(f"{path} is not a JSON object")
        if kind == "EnvironmentMetrics":
            out = {"power": _reading(doc.get("PowerWatts"), f"{path} PowerWatts")}
            if doc.get("EnergykWh") is not None:
                kwh = _reading(doc["EnergykWh"], f"{path} EnergykWh")
                out.update(energy=kwh * JOULES_PER_KWH)
            return out
        controls = doc.get("PowerControl")
        if not isinstance(controls, list) or not controls or not isinstance(controls[0], dict):
            raise BmcReadError(f"{path} has no PowerControl")
        watts = controls[0].get("PowerConsumedWatts")
        return {"power": _reading(watts, f"{path} PowerControl[0].PowerConsumedWatts")}
