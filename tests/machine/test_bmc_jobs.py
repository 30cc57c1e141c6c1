"""End to end under each real BMC emulator (issue 51): `milarun jobs quick --name polynome`
with the BMC configured in the environment, then `milarun report` of its folder shows the
node's power and node perf/W (text and JSON) and the node perf/W score, the result's own
figure."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

import bmcsim
from conftest import load_all, milarun

Emulator = Callable[[Path], AbstractContextManager[dict[str, str]]]  # yields milarun's BMC env


@contextmanager
def redfish(root: Path) -> Iterator[dict[str, str]]:
    """sushy-static with an energy counter rising at 1,500 W."""
    with bmcsim.redfish(root / "mockup") as server, bmcsim.energy_counter(server, 1500.0):
        yield bmcsim.bmc_env("redfish", server.url)


@contextmanager
def ipmi(root: Path) -> Iterator[dict[str, str]]:
    """ipmi_sim whose power sensor reads 950 W (no energy counter: readings integrated)."""
    with bmcsim.ipmi(root / "sim", raw=95) as sim:
        yield bmcsim.bmc_env("ipmi", sim.address, bmcsim.IPMI_USER, bmcsim.IPMI_PASSWORD)


@pytest.mark.slow  # a real `milarun jobs` and two `milarun report` (~30 s)
@pytest.mark.parametrize(
    ("bmc", "watts", "methods"),
    [(redfish, 1500.0, ("counter", "power")), (ipmi, 950.0, ("power",))],
)
def test_jobs_then_report_show_node_perf_per_watt(
    tmp_path: Path, bmc: Emulator, watts: float, methods: tuple[str, ...]
) -> None:
    """A steady window of 20 slices, long enough that a loaded machine's late BMC readings
    leave no gap over a quarter of it; Redfish's counter gives way to its power readings
    where its steps are coarse against the window (nodepower.COUNTER_STEP_SHARE)."""
    out = tmp_path / "out"
    with bmc(tmp_path) as env:
        done = milarun(
            "jobs", "quick", "--name", "polynome", "--devices", "cpu:1", "--no-cgexec",
            "-o", out, "--", "--min-slices", "20",
            env={**env, "MILARUN_BMC_INTERVAL": "0.25"}, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = [r for r in load_all(out).values() if r.get("name") == "quick.polynome"]
    node = result["node_energy"]
    assert node["reason"] is None and node["method"] in methods, node
    shown = milarun("report", out)
    assert shown.returncode == 0, shown.stderr
    section = shown.stdout.split("Node energy over the steady window")[1]
    assert "node perf/W" in section and "quick.polynome" in section, shown.stdout
    reported = milarun("report", out, "--format", "json")
    assert reported.returncode == 0, reported.stderr
    data = json.loads(reported.stdout)
    row = data["node_energy"]["quick.polynome"]
    assert row["node_watts"] == pytest.approx(watts, rel=0.03)
    assert row["node_perf_per_watt"] == pytest.approx(node["examples_per_joule"])
    assert row["method"] == node["method"]
    assert data["scores"]["node_perf_per_watt_score"] == pytest.approx(node["examples_per_joule"])
