"""Where the node's BMC is and how to log in: one place, a TOML file or the environment.

The file is ``$MILARUN_BMC_CONFIG``, else ``~/.config/milarun/bmc.toml``; its ``[bmc]`` table:

    protocol = "redfish"              # or "ipmi"
    address = "https://10.0.0.5"      # redfish: the service's URL; ipmi: host or host:port
    username = "admin"
    password_file = "/root/.bmc-password"   # or password = "..." in this (private) file
    chassis = "/redfish/v1/Chassis/1" # redfish, optional: else the first that reads power
    sensor = "Pwr Consumption"        # ipmi, optional: the SDR sensor when DCMI is absent
    interval = 1.0                    # seconds between readings
    timeout = 3.0                     # seconds one reading may take

``MILARUN_BMC_PROTOCOL``, ``MILARUN_BMC_ADDRESS``, ``MILARUN_BMC_USERNAME``,
``MILARUN_BMC_PASSWORD``, ``MILARUN_BMC_INTERVAL`` and ``MILARUN_BMC_TIMEOUT`` override the
file's values. Credentials never come from the command
line and never go into a result (results.records keeps no variable named like a secret).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from milarun import errors

CONFIG_ENV = "MILARUN_BMC_CONFIG"
DEFAULT_PATH = Path("~/.config/milarun/bmc.toml")
PROTOCOLS = ("redfish", "ipmi")
ENV_FIELDS = {
    "protocol": "MILARUN_BMC_PROTOCOL",
    "address": "MILARUN_BMC_ADDRESS",
    "username": "MILARUN_BMC_USERNAME",
    "password": "MILARUN_BMC_PASSWORD",
}
MAX_FILE_BYTES = 64 * 1024
KNOWN = {"protocol", "address", "username", "password", "password_file", "chassis", "sensor"}
NUMBERS = {"interval": (1.0, 0.1, 60.0), "timeout": (3.0, 0.2, 30.0)}  # default, min, max


class BmcConfigError(errors.InputError):
    """A BMC configuration that cannot be used."""


@dataclass(frozen=True)
class BmcConfig:
    """How to reach the node's BMC. ``repr`` hides the password."""

    protocol: str
    address: str
    username: str = ""
    password: str = ""
    chassis: str | None = None
    sensor: str | None = None
    interval: float = 1.0
    timeout: float = 3.0
    origin: str = ""  # the file or "environment" it came from (for messages)

    def __repr__(self) -> str:
        where = f"{self.protocol}, {self.address}, user={self.username!r}"
        return f"BmcConfig({where}, from {self.origin})"

    def describe(self) -> str:
        """What a result may say of the source (no address, no credentials)."""
        return self.protocol


def config_path(environ: os._Environ[str] | dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    given = env.get(CONFIG_ENV)
    return Path(given).expanduser() if given else DEFAULT_PATH.expanduser()


def _read_file(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise BmcConfigError(f"{path}: over {MAX_FILE_BYTES} bytes, not a BMC configuration")
        data = tomllib.loads(path.read_text())
    except OSError as err:
        raise BmcConfigError(f"{path}: cannot be read ({err.strerror or err})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise BmcConfigError(
            f"{path}: not TOML ({err}); see docs/reports.md (Node energy)"
        ) from None
    table = data.get("bmc")
    if not isinstance(table, dict):
        raise BmcConfigError(f"{path}: no [bmc] table; see docs/reports.md (Node energy)")
    return table


def _password_file(path: Path, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise BmcConfigError(f"{path}: bmc.password_file is {value!r}, not a file path")
    where = Path(value).expanduser()
    try:
        return where.read_text()[:4096].strip()
    except (OSError, UnicodeDecodeError) as err:
        raise BmcConfigError(f"{path}: bmc.password_file {where} cannot be read ({err})") from None


def load_config(environ: dict[str, str] | None = None) -> BmcConfig | None:
    """This node's BMC configuration; None when neither the file nor the environment names a
    BMC (node power is then not measured). A configuration that is there but wrong is a
    BmcConfigError naming the file and field."""
    env = dict(os.environ if environ is None else environ)
    path = config_path(env)
    from_file = path.is_file()
    table: dict[str, Any] = _read_file(path) if from_file else {}
    origin = str(path) if from_file else "environment"
    unknown = sorted(set(table) - KNOWN - set(NUMBERS))
    if unknown:
        raise BmcConfigError(f"{origin}: unknown key bmc.{unknown[0]} (known: {sorted(KNOWN)})")
    values: dict[str, Any] = {k: table[k] for k in KNOWN if k in table}
    if "password_file" in values:
        values["password"] = _password_file(path, values.pop("password_file"))
    for field, var in ENV_FIELDS.items():
        if env.get(var):
            values[field] = env[var]
    if not values.get("address"):
        if from_file or any(env.get(v) for v in ENV_FIELDS.values()):
            raise BmcConfigError(
                f"{origin}: no BMC address (bmc.address or {ENV_FIELDS['address']})"
            )
        return None
    for key in ("protocol", "address", "username", "password", "chassis", "sensor"):
        if key in values and not isinstance(values[key], str):
            raise BmcConfigError(f"{origin}: bmc.{key} is {values[key]!r}, not a string")
    protocol = values.get("protocol", "redfish")
    if protocol not in PROTOCOLS:
        raise BmcConfigError(f"{origin}: bmc.protocol is {protocol!r}, not one of {PROTOCOLS}")
    numbers = {}
    for key, (default, low, high) in NUMBERS.items():
        value = table.get(key, default)
        given = env.get(f"MILARUN_BMC_{key.upper()}")
        if given:
            try:
                value = float(given)
            except ValueError:
                value = given
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not low <= value <= high:
            raise BmcConfigError(
                f"{origin}: bmc.{key} is {value!r}, not a number of seconds in [{low}, {high}]"
            )
        numbers[key] = float(value)
    return BmcConfig(
        protocol=protocol,
        address=values["address"],
        username=values.get("username", ""),
        password=values.get("password", ""),
        chassis=values.get("chassis"),
        sensor=values.get("sensor"),
        origin=origin,
        **numbers,
    )
