"""Real BMC emulators on loopback for the node-power tests: sushy-tools' `sushy-static`
serving tests/data/redfish-node (a copy, so a test can move readings by rewriting files), and
OpenIPMI's `ipmi_sim` with a power sensor in watts read from a file. Each is started on a free
port, waited for (bounded), and stopped at the end; missing binaries skip with the reason."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

MOCKUP = Path(__file__).parent / "data" / "redfish-node"
SUSHY_STATIC = Path(sys.executable).parent / "sushy-static"
START_TIMEOUT = 15.0
METRICS = Path("Chassis/1/EnvironmentMetrics/index.json")
IPMI_USER, IPMI_PASSWORD = "admin", "node-secret"
WATTS_PER_STEP = 10  # the SDR sensor's M: a raw reading of 95 is 950 W


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Redfish:
    url: str
    root: Path  # the served copy of the mockup
    process: subprocess.Popen
    port: int

    def set_metrics(self, **fields: object) -> None:
        """Rewrite Chassis/1's EnvironmentMetrics atomically (the server re-reads it)."""
        path = self.root / METRICS
        doc = json.loads(path.read_text())
        doc.update(fields)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(5)


def _wait_tcp(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"emulator exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"emulator not listening on {port} after {START_TIMEOUT} s")


def start_redfish(root: Path, port: int | None = None) -> Redfish:
    if not SUSHY_STATIC.exists():
        pytest.skip(f"sushy-tools' sushy-static not installed ({SUSHY_STATIC})")
    if not (root / "index.json").exists():
        shutil.copytree(MOCKUP, root, dirs_exist_ok=True)
    port = port or free_port()
    process = subprocess.Popen(
        [str(SUSHY_STATIC), "-i", "127.0.0.1", "-p", str(port), "-m", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_tcp(port, process)
    return Redfish(f"http://127.0.0.1:{port}", root, process, port)


@contextmanager
def redfish(root: Path) -> Iterator[Redfish]:
    server = start_redfish(root)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def energy_counter(server: Redfish, watts: float, step: float = 0.1) -> Iterator[None]:
    """Keep the mockup's EnergykWh rising at ``watts`` (and PowerWatts at it) while inside."""
    done = threading.Event()
    start, base_kwh = time.time(), 1520.25

    def tick() -> None:
        while not done.wait(step):
            kwh = base_kwh + watts * (time.time() - start) / 3.6e6
            server.set_metrics(PowerWatts={"Reading": watts}, EnergykWh={"Reading": round(kwh, 7)})

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(2)


def _sdr_power_sensor(number: int, name: bytes) -> list[int]:
    """A Full Sensor Record (IPMI 2.0 section 43.1): threshold sensor, unit watts (6),
    linear, reading = M x raw with M = WATTS_PER_STEP."""
    body = [0x20, 0x00, number, 0x17, 0x01, 0x7F, 0x68, 0x0B, 0x01]
    body += [0, 0, 0, 0, 0, 0]  # event masks
    body += [0x00, 0x06, 0x00, 0x00]  # units 1, base unit watts, modifier, linear
    body += [WATTS_PER_STEP, 0, 0, 0, 0, 0]  # M, tolerance, B, accuracy, R/B exponents
    body += [0, 0, 0, 0, 0xFF, 0]  # analog flags, nominal, normal max/min, sensor max/min
    body += [0] * 11  # thresholds, hysteresis, reserved, OEM
    body += [0xC0 | len(name), *name]
    return [0x01, 0x00, 0x51, 0x01, len(body), *body]


@dataclass
class Ipmi:
    address: str
    watts_file: Path
    process: subprocess.Popen

    def set_raw(self, raw: int) -> None:
        self.watts_file.write_text(f"{raw}\n")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(5)


@contextmanager
def ipmi(folder: Path, raw: int = 95) -> Iterator[Ipmi]:
    """ipmi_sim with one BMC whose 'Pwr Consumption' sensor reads ``raw`` x 10 W (polled
    from a file every 0.2 s); no DCMI (ipmi_sim has none)."""
    binary = shutil.which("ipmi_sim")
    if binary is None:
        pytest.skip("OpenIPMI's ipmi_sim not installed (Debian: openipmi)")
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port(socket.SOCK_DGRAM)
    watts = folder / "watts"
    watts.write_text(f"{raw}\n")
    record = " ".join(f"0x{b:02x}" for b in _sdr_power_sensor(1, b"Pwr Consumption"))
    (folder / "lan.conf").write_text(
        f"""name "milarun"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {port}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
user 2 true "{IPMI_USER}" "{IPMI_PASSWORD}" admin 10 none md2 md5 straight
"""
    )
    (folder / "node.emu").write_text(
        f"""mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
main_sdr_add 0x20 {record}
sensor_add 0x20 0 1 0x0b 0x01 poll 200 file "{watts}"
mc_enable 0x20
"""
    )
    process = subprocess.Popen(
        [binary, "-c", str(folder / "lan.conf"), "-f", str(folder / "node.emu")]
        + ["-s", str(folder / "state"), "-n"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sim = Ipmi(f"127.0.0.1:{port}", watts, process)
    try:
        _wait_udp(port, process)
        yield sim
    finally:
        sim.stop()


def _wait_udp(port: int, process: subprocess.Popen) -> None:
    """Until ipmi_sim holds its UDP port (it answers as soon as it binds it)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ipmi_sim exited with {process.returncode}")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return  # taken: ipmi_sim has it
        time.sleep(0.1)
    raise RuntimeError(f"ipmi_sim not on UDP {port} after {START_TIMEOUT} s")


def bmc_env(protocol: str, address: str, user: str = "", password: str = "", **more: str) -> dict:
    """The environment that configures milarun's BMC (no file: MILARUN_BMC_CONFIG points
    nowhere, so the operator's own ~/.config/milarun/bmc.toml is never read by a test)."""
    return {
        "MILARUN_BMC_CONFIG": "/nonexistent/bmc.toml",
        "MILARUN_BMC_PROTOCOL": protocol,
        "MILARUN_BMC_ADDRESS": address,
        "MILARUN_BMC_USERNAME": user,
        "MILARUN_BMC_PASSWORD": password,
        **more,
    }
