"""Node power through IPMI (pyghmi, RMCP+): DCMI's Get Power Reading where the BMC has DCMI,
else the SDR sensor in watts that the configuration names (or the first one the BMC lists)."""

from __future__ import annotations

import math
from typing import Any

from milarun.machine.bmc.config import BmcConfig
from milarun.machine.bmc.redfish import BmcReadError

DEFAULT_PORT = 623
INVALID_COMMAND = 0xC1  # the completion code of a BMC without the command (no DCMI)


def host_port(address: str) -> tuple[str, int]:
    """``host``, ``host:port`` or ``ipmi://host:port`` as (host, port)."""
    bare = address.removeprefix("ipmi://").rstrip("/")
    host, sep, port = bare.rpartition(":")
    if sep and port.isdigit() and "]" not in port:
        return host.strip("[]"), int(port)
    return bare.strip("[]"), DEFAULT_PORT


class IpmiReader:
    """Reads the node's power (W); logs in on the first reading and again after a failure."""

    def __init__(self, config: BmcConfig):
        self.config = config
        self._cmd: Any = None
        self._dcmi: bool | None = None  # None: not tried yet
        self._sensor: str | None = config.sensor
        self.source = "ipmi"

    def _connect(self) -> None:
        from pyghmi.ipmi import command  # type: ignore[import-untyped]

        host, port = host_port(self.config.address)
        self._cmd = command.Command(
            bmc=host, port=port, userid=self.config.username, password=self.config.password
        )

    def _find_sensor(self) -> str:
        for reading in self._cmd.get_sensor_data():
            if getattr(reading, "units", None) == "W" and reading.value is not None:
                return str(reading.name)
        raise BmcReadError("the BMC has neither DCMI nor a sensor in watts")

    def _power(self) -> float:
        from pyghmi import exceptions  # type: ignore[import-untyped]

        if self._dcmi is not False and self._sensor is None:
            try:
                watts = self._cmd.get_system_power_watts()
                self._dcmi = True
                self.source = "ipmi dcmi"
                return float(watts)
            except exceptions.IpmiException as err:
                if self._dcmi or getattr(err, "ipmicode", None) != INVALID_COMMAND:
                    raise
                self._dcmi = False
        if self._sensor is None:
            self._sensor = self._find_sensor()
        self.source = f"ipmi sensor {self._sensor!r}"
        return self._cmd.get_sensor_reading(self._sensor).value

    def read(self) -> dict[str, Any]:
        if self._cmd is None:
            self._connect()
        try:
            watts = self._power()
        except Exception:
            self._cmd = None  # log in again next time: the BMC may have been reset
            raise
        ok = isinstance(watts, int | float) and not isinstance(watts, bool)
        if not ok or not math.isfinite(watts) or watts < 0:
            raise BmcReadError(f"{self.source} gave {watts!r}, not a power in watts")
        return {"power": float(watts)}
