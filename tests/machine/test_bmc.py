"""Node power from the BMC (milarun.machine.bmc, milarun.measure.nodepower): real emulators on
loopback (sushy-tools' sushy-static serving a Redfish mockup, OpenIPMI's ipmi_sim), real
`milarun run` processes, and the steady window's node energy from known readings."""

from __future__ import annotations

import json
import time

import pytest

import bmcsim
from conftest import load_all, milarun, milarun_process
from fakes import FakeNVML, run_on_fake_gpu
from milarun.machine import bmc
from milarun.machine.bmc import BmcConfig, BmcConfigError, load_config
from milarun.measure import energy, nodepower, runner
from milarun.results.records import RateRecord

RUN = ["run", "milabench.models.calibration:main"]
# a steady window of 10 slices (5 s): 20 readings at 0.25 s
ARGS = ["--", "--min-slices", "12", "--step-time", "0.02"]


# A BMC answers through processes as loaded as the run's: a window of 28 slices (14 s) allows
# a gap of 3.5 s between readings, which a loaded 2-core machine was seen to reach (1.9 s)
ARGS_LONG = ["--", "--min-slices", "30", "--step-time", "0.02"]


def _run(tmp_path, env, args=ARGS):
    out = tmp_path / "out"
    done = milarun(*RUN, "-o", out, *args, env=env, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    ((name, written),) = load_all(out).items()
    return written, (out / name).read_text()


# -- configuration ------------------------------------------------------------------------
def test_no_bmc_configured_gives_none(tmp_path):
    assert load_config({"MILARUN_BMC_CONFIG": str(tmp_path / "none.toml")}) is None


def test_the_file_and_its_password_file(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    path = tmp_path / "bmc.toml"
    path.write_text(
        f'[bmc]\nprotocol = "ipmi"\naddress = "10.0.0.5:623"\nusername = "root"\n'
        f'password_file = "{secret}"\ninterval = 2\n'
    )
    found = load_config({"MILARUN_BMC_CONFIG": str(path), "MILARUN_BMC_USERNAME": "ops"})
    assert found is not None
    assert (found.protocol, found.address, found.username, found.password, found.interval) == (
        "ipmi",
        "10.0.0.5:623",
        "ops",  # the environment wins
        "s3cret",
        2.0,
    )
    assert "s3cret" not in repr(found)


@pytest.mark.parametrize(
    "text, says",
    [
        ("[bmc\n", "not TOML"),
        ("[other]\n", "no [bmc] table"),
        ('[bmc]\naddress = "x"\nprotocol = "snmp"\n', "bmc.protocol is 'snmp'"),
        ('[bmc]\naddress = "x"\ninterval = 0\n', "bmc.interval is 0"),
        ('[bmc]\naddress = "x"\nport = 1\n', "unknown key bmc.port"),
        ('[bmc]\nusername = "x"\n', "no BMC address"),
    ],
)
def test_a_bad_file_is_named(tmp_path, text, says):
    path = tmp_path / "bmc.toml"
    path.write_text(text)
    with pytest.raises(BmcConfigError, match="bmc.toml") as err:
        load_config({"MILARUN_BMC_CONFIG": str(path)})
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_bad_configuration_is_a_note_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setenv("MILARUN_BMC_CONFIG", str(tmp_path / "bmc.toml"))
    (tmp_path / "bmc.toml").write_text("[bmc]\n")
    record = bmc.node_monitor().start().stop()
    assert record["samples"] == [] and "no BMC address" in record["note"]


# -- the readers against the emulators ------------------------------------------------------
def test_redfish_reads_environment_metrics_and_the_older_power(tmp_path):
    with bmcsim.redfish(tmp_path / "mockup") as server:
        new = bmc.reader(BmcConfig("redfish", server.url, "u", "p", timeout=2))
        assert new.read() == {"power": 1200.0, "energy": pytest.approx(1520.25 * 3.6e6)}
        assert new.source == "redfish /redfish/v1/Chassis/1 EnvironmentMetrics"
        old = bmc.reader(BmcConfig("redfish", server.url, chassis="/redfish/v1/Chassis/2"))
        assert old.read() == {"power": 900.0}
        server.set_metrics(PowerWatts={"Reading": "lots"})
        with pytest.raises(Exception, match="PowerWatts is 'lots', not a reading"):
            new.read()


def test_ipmi_reads_the_power_sensor_where_dcmi_is_refused(tmp_path):
    with bmcsim.ipmi(tmp_path / "sim", raw=95) as sim:
        config = BmcConfig("ipmi", sim.address, bmcsim.IPMI_USER, bmcsim.IPMI_PASSWORD)
        read = bmc.reader(config)
        assert read.read() == {"power": 950.0}
        assert read.source == "ipmi sensor 'Pwr Consumption'"  # ipmi_sim has no DCMI
        sim.set_raw(80)
        time.sleep(0.6)  # the sensor polls its file every 0.2 s
        assert read.read() == {"power": 800.0}


# -- whole runs ---------------------------------------------------------------------------
@pytest.mark.slow  # a real `milarun run` (~18 s)
def test_a_run_under_redfish_carries_node_energy_from_the_counter(tmp_path):
    with bmcsim.redfish(tmp_path / "mockup") as server, bmcsim.energy_counter(server, 1500.0):
        env = bmcsim.bmc_env("redfish", server.url, "admin", "pw-never-kept")
        # the long window: its start well after the counter's first reading, however late a
        # loaded machine's first answer comes (CI: none before the 12-slice run's window)
        written, text = _run(tmp_path, {**env, "MILARUN_BMC_INTERVAL": "0.25"}, ARGS_LONG)
    node = written["node_energy"]
    assert node["reason"] is None, node
    assert node["method"] == "counter" and node["instances"] == 1
    assert node["watts"] == pytest.approx(1500.0, rel=0.03)
    assert node["joules"] == pytest.approx(1500.0 * node["seconds"], rel=0.03)
    assert node["examples_per_joule"] == pytest.approx(node["examples"] / node["joules"])
    assert node["gpu_joules"] is None and node["rest_joules"] is None  # a CPU run
    assert node["source"].startswith("redfish /redfish/v1/Chassis/1")
    assert written["node_monitor"]["backend"] == "redfish"
    assert "pw-never-kept" not in text and "MILARUN_BMC_PASSWORD" not in text
    assert server.url not in text  # the address stays in the configuration


@pytest.mark.slow  # a real `milarun run` (~18 s)
def test_a_run_under_ipmi_sim_carries_node_energy_from_power_readings(tmp_path):
    with bmcsim.ipmi(tmp_path / "sim", raw=95) as sim:
        env = bmcsim.bmc_env("ipmi", sim.address, bmcsim.IPMI_USER, bmcsim.IPMI_PASSWORD)
        written, text = _run(tmp_path, {**env, "MILARUN_BMC_INTERVAL": "0.25"}, ARGS_LONG)
    node = written["node_energy"]
    assert node["reason"] is None, node
    assert node["method"] == "power" and node["readings"] >= nodepower.MIN_READINGS
    assert node["watts"] == pytest.approx(950.0, rel=0.01)
    assert bmcsim.IPMI_PASSWORD not in text


def test_a_gpu_run_splits_the_node_into_its_gpus_and_the_rest(tmp_path, monkeypatch):
    """The runner in process: a fake H100 drawing 400 W (NVML power readings) in a node the
    Redfish emulator says draws 1,500 W, shared by 2 instances: a share of 750 W, 350 W of it
    the rest of the node."""
    h100 = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-h100", "utilization": [99, 0]}
    fake = FakeNVML([{**h100, "memory": 80 * 2**30, "temperature": 60, "power_usage_mw": 400_000}])
    run_on_fake_gpu(monkeypatch, fake)
    with bmcsim.redfish(tmp_path / "mockup") as server, bmcsim.energy_counter(server, 1500.0):
        env = bmcsim.bmc_env("redfish", server.url) | {"MILARUN_BMC_INTERVAL": "0.25"}
        for name, value in {**env, nodepower.INSTANCES_ENV: "2"}.items():
            monkeypatch.setenv(name, value)
        result, _ = runner.run_test(
            "milabench.models.calibration:main",
            ["--min-slices", "12", "--step-time", "0.02"],
            "calibration",
            "0",
            tmp_path,
            tmp_path,
        )
    node, gpu = result["node_energy"], result["energy"]
    assert node["reason"] is None and gpu["method"] == "power", (node, gpu)
    assert node["instances"] == 2 and node["watts"] == pytest.approx(1500.0, rel=0.03)
    assert node["gpu_joules"] == gpu["joules"]
    seconds = node["seconds"]
    assert node["share_joules"] / seconds == pytest.approx(750.0, rel=0.03)
    assert node["rest_joules"] / seconds == pytest.approx(350.0, rel=0.06)
    assert node["examples_per_joule"] == pytest.approx(gpu["examples"] / node["share_joules"])
    assert node["examples_per_joule"] < gpu["examples_per_joule"]  # the plug costs more


@pytest.mark.slow  # a real `milarun jobs` of two instances (~30 s)
def test_jobs_side_by_side_share_the_node(tmp_path):
    """Two per-gpu instances (CPU slices) at once under one BMC: each is charged half the
    node, and the report adds the Node energy section."""
    out = tmp_path / "out"
    with bmcsim.redfish(tmp_path / "mockup") as server, bmcsim.energy_counter(server, 1000.0):
        env = bmcsim.bmc_env("redfish", server.url) | {"MILARUN_BMC_INTERVAL": "0.25"}
        done = milarun(
            "jobs", "quick", "--name", "calibration", "--devices", "cpu:2", "--no-cgexec",
            "-o", out, "--", "--min-slices", "12", env=env, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    found = [r for r in load_all(out).values() if r.get("name") == "quick.calibration"]
    assert len(found) == 2
    for result in found:
        node = result["node_energy"]
        assert node["instances"] == 2 and node["reason"] is None, node
        assert node["share_joules"] == pytest.approx(node["joules"] / 2)
        assert "MILARUN_NODE_INSTANCES" not in result["environ"]
    assert "Node energy over the steady window" in done.stdout


@pytest.mark.slow  # a real `milarun run` (~10 s)
def test_a_bmc_that_refuses_gives_a_note_and_the_run_goes_on(tmp_path):
    env = bmcsim.bmc_env("redfish", f"http://127.0.0.1:{bmcsim.free_port()}")
    written, _ = _run(tmp_path, {**env, "MILARUN_BMC_INTERVAL": "0.5", "MILARUN_BMC_TIMEOUT": "1"})
    assert written["success"]
    node = written["node_energy"]
    assert node["joules"] is None and node["examples_per_joule"] is None
    assert "no samples" in node["reason"] and "Connection" in node["reason"]


@pytest.mark.slow  # a real `milarun run` (~10 s)
def test_a_bmc_reset_mid_run_gives_no_node_figure(tmp_path):
    """The BMC goes down for 2.5 s of the 5 s window, then comes back: the reader logs in
    again, and the window has a gap too long to interpolate over."""
    server = bmcsim.start_redfish(tmp_path / "mockup")
    env = bmcsim.bmc_env("redfish", server.url)
    env |= {"MILARUN_BMC_INTERVAL": "0.25", "MILARUN_BMC_TIMEOUT": "1"}
    out = tmp_path / "out"
    process = milarun_process(*RUN, "-o", str(out), *ARGS, env=env)
    try:
        assert process.stderr is not None
        for line in process.stderr:  # the first measured slice
            if "examples/s" in line:
                break
        time.sleep(0.5)
        server.stop()
        time.sleep(2.5)
        server = bmcsim.start_redfish(server.root, server.port)
        process.communicate(timeout=120)
    finally:
        process.kill()
        server.stop()
    assert process.returncode == 0
    (written,) = load_all(out).values()
    node = written["node_energy"]
    assert node["joules"] is None and node["reason"].startswith("too few BMC readings"), node
    assert "a gap of" in node["reason"]
    assert written["node_monitor"]["samples"][-1]["bmc"]["power"] == 1200.0  # back again


def test_no_bmc_leaves_results_as_they_were(tmp_path, monkeypatch):
    monkeypatch.setenv("MILARUN_BMC_CONFIG", str(tmp_path / "none.toml"))
    for name in bmcsim.bmc_env("redfish", "x"):
        if name != "MILARUN_BMC_CONFIG":
            monkeypatch.delenv(name, raising=False)
    record = bmc.node_monitor().start().stop()
    assert nodepower.node_energy_record(_timings(), record, None) is None


# -- the window's node energy from known readings --------------------------------------------
T0 = 1_000_000.0


def _timings(slices: int = 24, width: float = 0.5) -> dict:
    record = RateRecord(
        start=T0,
        duration=width * slices,
        in_block=width * slices,
        count=int(100 * width * slices),
        max_count=None,
        blocks=slices,
        syncs=slices,
        slice=width,
        last_slice=None,
        rates=(100.0,) * slices,
        slice_ends=tuple(T0 + width * (i + 1) for i in range(slices)),
    )
    return {"train": record}


def _monitor(readings, interval=0.5, errors=None):
    samples = [{"time": t, "bmc": dict(r), "source": "redfish test"} for t, r in readings]
    record = {"interval": interval, "samples": samples, "backend": "redfish"}
    if errors:
        record["errors"] = errors
    return record


def test_power_readings_are_integrated_over_the_window():
    readings = [(T0 + 0.5 * i, {"power": 1000.0}) for i in range(30)]
    gpu = energy.Energy(joules=2000.0, examples=900.0)
    found = nodepower.node_energy_record(_timings(), _monitor(readings), gpu, instances=2)
    assert found is not None and found.reason is None and found.method == "power"
    assert found.joules == pytest.approx(1000.0 * found.seconds)
    assert found.share_joules == pytest.approx(found.joules / 2)
    assert found.rest_joules == pytest.approx(found.share_joules - 2000.0)
    assert found.examples_per_joule == pytest.approx(900.0 / found.share_joules)


def test_a_coarse_counter_gives_way_to_power_readings():
    # 1 kWh steps (3.6 MJ) cannot measure a window of ~9 kJ: the power readings do
    readings = [(T0 + 0.5 * i, {"power": 1000.0, "energy": 3.6e6 * (i // 10)}) for i in range(30)]
    found = nodepower.node_energy_record(_timings(), _monitor(readings), None, instances=1)
    assert found is not None and found.method == "power"
    assert found.watts == pytest.approx(1000.0)


def test_a_slow_bmc_gives_no_node_figure_and_says_so():
    readings = [(T0 + 4.0 * i, {"power": 1000.0}) for i in range(5)]  # one every 4 s
    found = nodepower.node_energy_record(_timings(), _monitor(readings), None, instances=1)
    assert found is not None and found.joules is None and found.examples_per_joule is None
    assert found.reason.startswith("too few BMC readings")
    assert "no node figure" in found.reason


def test_a_node_reading_below_its_gpus_is_nonsense():
    readings = [(T0 + 0.5 * i, {"power": 100.0}) for i in range(30)]
    gpu = energy.Energy(joules=5000.0, examples=900.0)
    found = nodepower.node_energy_record(_timings(), _monitor(readings), gpu, instances=1)
    assert found is not None and found.examples_per_joule is None
    assert "below its GPUs' own" in found.reason


def test_the_record_is_json():
    readings = [(T0 + 0.5 * i, {"power": 1000.0}) for i in range(30)]
    found = nodepower.node_energy_record(_timings(), _monitor(readings), None)
    assert found is not None
    assert json.loads(json.dumps(found.to_dict()))["watts"] == pytest.approx(1000.0)


def test_a_window_edge_is_held_by_a_reading_near_it_only():
    # the window is [T0 + 2, T0 + 11] (slices 4-21 of 24 at 0.5 s: rates[-20:-2])
    found = nodepower.node_energy_record(_timings(), _monitor([]), None)
    assert found is not None and found.joules is None
    near = [(T0 + 2.5 + 0.5 * i, {"power": 1000.0}) for i in range(30)]  # from 0.5 s after
    found = nodepower.node_energy_record(_timings(), _monitor(near), None)
    assert found is not None and found.reason is None
    assert found.watts == pytest.approx(1000.0)
    late = [(T0 + 6.5 + 0.5 * i, {"power": 1000.0}) for i in range(30)]  # half the window
    found = nodepower.node_energy_record(_timings(), _monitor(late), None)
    assert found is not None and found.joules is None and "too few" in found.reason
