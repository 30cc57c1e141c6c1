"""`milarun slurm` on a real Slurm cluster: two virtual nodes on this host, started by
scripts/slurm-dev-cluster.sh (Debian's slurmctld, slurmd and munged; needs root)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from conftest import milarun
from milarun.results.folder import load_dir
from slurm.conftest import CLUSTER_MARKS, SCRIPT

# One cluster at a time on this host: the whole module on one worker, in a row (the
# cluster fixture and these marks: tests/slurm/conftest.py).
pytestmark = CLUSTER_MARKS


def _results(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json")) if ".J" in p.name]


def _profile(tmp_path: Path, arguments: dict, max_duration: int = 120) -> Path:
    path = tmp_path / "profile.json"
    path.write_text(
        json.dumps(
            {
                "*": {"partition_scheme": {"type": "per-gpu"}, "max_duration": max_duration},
                "spin": {"experiment": "faulty:kills_its_supervisor_on", "arguments": arguments},
            }
        )
    )
    return path


def test_fleet_two_nodes_gives_a_folder_and_a_report_row_per_node(cluster, tmp_path):
    out, local = tmp_path / "out", tmp_path / "local"  # local: each node's own disk
    done = milarun(
        "slurm",
        "fleet",
        "quick",
        "--nodes",
        "2",
        "--name",
        "polynome",
        "--devices",
        "cpu:1",
        "--no-cgexec",
        "--wait",
        "-o",
        out,
        "--local-dir",
        local,
        "-d",
        tmp_path / "data",
        "--db",
        tmp_path / "history.sqlite",
        "--",
        "--min-slices",
        "4",
        env=cluster,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (out / "nodes").iterdir()) == ["node1", "node2"]
    # --db: the fleet run, both nodes, ingested at its end as one run
    assert "run 1 on node1+1: 2 result(s) added" in done.stdout
    # gathered from node-local disk (verified), then removed there
    assert not list(local.glob("milarun-*/nodes/*/*"))
    assert list(out.glob("nodes/node2/logs/quick.polynome.*.log"))
    for node in ("node1", "node2"):
        (result,) = _results(out / "nodes" / node)
        assert result["success"] and result["name"] == "quick.polynome"
        assert result["node"] == node
        assert result["slurm"]["node"] == node and result["slurm"]["nodelist"] == "node[1-2]"
        assert result["slurm"]["nnodes"] == 2 and result["slurm"]["step_id"] == "0"
    assert "job " in done.stdout and ": COMPLETED on node[1-2]" in done.stdout
    report = done.stdout[done.stdout.index("Per node") :]
    assert "node1" in report and "node2" in report
    (page,) = out.glob("report.*.html")  # and its page, with the node x device heat map
    assert str(page.resolve()) in done.stdout and "node-devices" in page.read_text()
    # the script stays with the results, and the job's output beside it
    (script,) = (out / "slurm").glob("fleet.*.sbatch")
    assert "#SBATCH --nodes=2" in script.read_text()
    assert list((out / "slurm").glob("milarun-fleet.*.out"))
    # the submission record and the logs are not taken for results
    assert load_dir(out).skipped == []


def test_scaling_on_two_nodes_has_ranks_on_both(cluster, tmp_path):
    out = tmp_path / "out"
    done = milarun(
        "slurm",
        "scaling",
        "quick",
        "--name",
        "scaling",  # not llm-scaling too: FSDP over two nodes is its own test's
        "--nodes",
        "1,2",
        "--devices",
        "cpu:1",
        "--wait",
        "-o",
        out,
        "-d",
        tmp_path / "data",
        "--",
        "--min-slices",
        "4",
        env=cluster,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = {r["name"]: r for r in _results(out / "nodes" / "node1")}
    assert sorted(found) == ["quick.scaling.1", "quick.scaling.2"]
    assert [r["node"] for r in found["quick.scaling.1"]["ranks"]] == ["node1"]
    two = found["quick.scaling.2"]
    assert two["success"] and two["world_size"] == 2
    assert [(r["rank"], r["node"], r["device"]) for r in two["ranks"]] == [
        (0, "node1", "cpu:0"),
        (1, "node2", "cpu:0"),
    ]
    assert not _results(out / "nodes" / "node2")  # rank 0 on the head records the run
    table = done.stdout[done.stdout.index("Scaling") :]
    assert "quick.scaling.2" in table and "%" in table  # efficiency against one node


def test_a_node_that_records_nothing_gets_fail_records_and_the_others_are_kept(cluster, tmp_path):
    out = tmp_path / "out"
    profile = _profile(tmp_path, {"--node": "node2", "--min-slices": 4})
    # one job per node: the broken node fails its own job only
    done = milarun(
        "slurm",
        "fleet",
        profile,
        "--each-node",
        "--nodelist",
        "node[1-2]",
        "--devices",
        "cpu:1",
        "--wait",
        "-o",
        out,
        "-d",
        tmp_path / "data",
        env=cluster,
    )
    assert done.returncode != 0
    jobs = done.stdout.split("submitted job ")[1:]
    assert [j.split()[1:3] for j in jobs] == [["(node", "node1)"], ["(node", "node2)"]]
    first, second = (j.split()[0] for j in jobs)
    assert f"job {first}: COMPLETED on node1" in done.stdout
    assert f"job {second}: FAILED on node2" in done.stdout
    (kept,) = _results(out / "nodes" / "node1")
    assert kept["success"] and kept["node"] == "node1"
    (fail,) = _results(out / "nodes" / "node2")
    assert not fail["success"] and fail["node"] == "node2"
    assert fail["written_by"] == "milarun slurm check"
    assert "node node2 recorded no result for profile.spin" in fail["failure"]["message"]
    assert "FAIL" in done.stderr


def test_scancel_leaves_fail_records(cluster, tmp_path):
    out = tmp_path / "out"
    profile = _profile(tmp_path, {"--node": "none", "--min-slices": 1000}, max_duration=300)
    submitted = milarun(
        "slurm",
        "fleet",
        profile,
        "--nodes",
        "2",
        "--devices",
        "cpu:1",
        "-o",
        out,
        "-d",
        tmp_path / "data",
        env=cluster,
    )
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.split("submitted job ")[1].split()[0]
    deadline = time.monotonic() + 60
    logs = []
    while len(logs) < 2 and time.monotonic() < deadline:  # both nodes are running it
        logs = list(out.glob("nodes/*/logs/*.log"))
        time.sleep(0.2)
    assert len(logs) == 2
    subprocess.run(["scancel", job], check=True, env={**os.environ, **cluster})
    waited = milarun("slurm", "wait", out, env=cluster)
    assert waited.returncode != 0
    assert f"job {job}: CANCELLED" in waited.stdout
    # the report names each node's run that the cancel cut short
    assert "on node node1 was cut short (SIGTERM)" in waited.stdout
    assert "on node node2 was cut short (SIGTERM)" in waited.stdout
    for node in ("node1", "node2"):
        fails = [r for r in _results(out / "nodes" / node) if not r["success"]]
        assert fails and fails[0]["failure"]["kind"] in ("interrupted", "killed"), fails


def test_stopping_the_cluster_ends_its_running_jobs(tmp_path):
    """`down` while a job runs: the job, its step daemon and its processes all end."""
    folder = tmp_path / "one"
    env = {**os.environ, "MILARUN_SLURM_DEV": str(folder), "SLURM_CONF": str(folder / "slurm.conf")}
    up = subprocess.run([SCRIPT, "up", "1"], capture_output=True, text=True, env=env, timeout=60)
    assert up.returncode == 0, up.stderr
    marker = f"sleep 300.{os.getpid()}"  # this test's own sleep, found by its arguments
    try:
        subprocess.run(
            ["sbatch", "--wrap", marker, "-o", "/dev/null"],
            check=True,
            env=env,
            capture_output=True,
        )
        deadline = time.monotonic() + 30
        while not _running(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _running(marker)
    finally:
        down = subprocess.run([SCRIPT, "down"], capture_output=True, text=True, env=env, timeout=60)
    assert down.returncode == 0, down.stderr
    assert not _running(marker) and not folder.exists()
    assert not [p for p in _pids("slurmstepd") if str(folder) in _cwd(p)]


def _pids(name: str) -> list[int]:
    done = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()]


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _running(marker: str) -> bool:
    done = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return bool(done.stdout.split())
