"""The node's energy in the summary and the report (milarun.report.nodeenergy): results whose
``node_energy`` is known (two per-gpu instances sharing a 2,000 W node), one test whose BMC
gave no figure, and the text, JSON and HTML reports of them."""

from __future__ import annotations

import json

import pytest

from conftest import milarun
from resultfactory import result, write

SECONDS = 9.0


def node_record(node_watts, gpu_watts, examples, instances=2, reason=None):
    if reason is not None:
        return {"joules": None, "seconds": SECONDS, "instances": instances, "reason": reason}
    joules = node_watts * SECONDS
    share = joules / instances
    return {
        "joules": joules,
        "seconds": SECONDS,
        "watts": node_watts,
        "instances": instances,
        "share_joules": share,
        "gpu_joules": gpu_watts * SECONDS,
        "rest_joules": share - gpu_watts * SECONDS,
        "examples": examples,
        "examples_per_joule": examples / share,
        "method": "power",
        "readings": 18,
        "source": "redfish /redfish/v1/Chassis/1 EnvironmentMetrics",
        "reason": None,
    }


@pytest.fixture(scope="module")
def node_results(tmp_path_factory):
    """gpu.convnet: 2 instances at 1000/s on a 2,000 W node whose GPUs draw 600 W each
    (share 1,000 W, 60% GPUs, 400 W rest; node perf/W 1); gpu.wlm: its BMC gave no figure."""
    root = tmp_path_factory.mktemp("node")
    res = root / "results"
    for job, device in (("0.0", "cuda:0"), ("0.1", "cuda:1")):
        rec = node_record(2000.0, 600.0, 1000.0 * SECONDS)
        write(res, result("gpu.convnet", job, 1000.0, device=device, node_energy=rec))
    slow = node_record(0, 0, 0, reason="too few BMC readings: 2 in the 9.0 s steady window")
    write(res, result("gpu.wlm", "0.0", 400.0, device="cuda:0", node_energy=slow))
    weights = root / "weights.json"
    weights.write_text(json.dumps({"gpu.convnet": 1, "gpu.wlm": 1}))
    return res, weights


def test_summary_keeps_the_node_energy(node_results, tmp_path):
    res, _ = node_results
    out = tmp_path / "summary.json"
    done = milarun("summary", res, "-o", out)
    assert done.returncode == 0, done.stderr
    summ = json.loads(out.read_text())
    node = summ["gpu.convnet"]["node_energy"]
    assert node["n"] == 2 and node["node_watts"] == pytest.approx(2000.0)
    assert node["share_watts"] == pytest.approx(1000.0)
    assert node["gpu_share"] == pytest.approx(0.6) and node["rest_watts"] == pytest.approx(400.0)
    assert node["examples_per_joule"] == pytest.approx(1.0)
    wlm = summ["gpu.wlm"]["node_energy"]
    assert wlm["n"] == 0 and wlm["examples_per_joule"] is None
    assert wlm["notes"] == ["too few BMC readings: 2 in the 9.0 s steady window (1 run)"]


def test_report_shows_node_perf_per_watt(node_results, tmp_path):
    res, weights = node_results
    done = milarun("report", res, "--weights", weights, "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    row = data["node_energy"]["gpu.convnet"]
    assert row["node_perf_per_watt"] == pytest.approx(1.0) and row["gpu_share"] == 0.6
    assert data["scores"]["node_perf_per_watt_score"] == pytest.approx(1.0)
    assert data["scores"]["node_perf_per_watt_coverage"] == pytest.approx(0.5)
    assert data["node_energy_notes"] == [
        "gpu.wlm: no node energy: too few BMC readings: 2 in the 9.0 s steady window (1 run)"
    ]
    text = milarun("report", res, "--weights", weights).stdout
    assert "Node energy over the steady window" in text and "Node perf/W score" in text
    assert "gpu.wlm: no node energy: too few BMC readings" in text
    page = tmp_path / "r.html"
    done = milarun("report", res, "--weights", weights, "--html", page)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert 'id="node-energy"' in html and "too few BMC readings" in html


def test_a_hand_edited_node_energy_is_named(tmp_path, node_results):
    res, _ = node_results
    out = tmp_path / "summary.json"
    assert milarun("summary", res, "-o", out).returncode == 0
    summ = json.loads(out.read_text())
    summ["gpu.convnet"]["node_energy"]["node_watts"] = -5
    out.write_text(json.dumps(summ))
    done = milarun("report", out)
    assert done.returncode != 0 and "'node_energy.node_watts' is -5" in done.stderr


def test_results_without_a_bmc_get_nothing_new(tmp_path):
    res = tmp_path / "results"
    write(res, result("gpu.convnet", "0.0", 1000.0, device="cuda:0"))
    text = milarun("report", res).stdout
    assert "Node energy" not in text and "Node perf/W" not in text
