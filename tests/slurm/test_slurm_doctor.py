"""`milarun slurm doctor` on the 2-node dev cluster (tests/slurm/conftest.py's): the active
checks of every node, their records, and the per-node table."""

from __future__ import annotations

from conftest import milarun
from milarun.doctor.active import record
from slurm.conftest import CLUSTER_MARKS

# the cluster's marks (tests/slurm/conftest.py): in test_slurm's xdist group, never beside it
pytestmark = CLUSTER_MARKS


def test_slurm_doctor_measures_every_node_and_tables_them(cluster, tmp_path):
    out = tmp_path / "out"
    done = milarun(
        "slurm",
        "doctor",
        "--nodes",
        "2",
        "--active",
        "quick",
        "--devices",
        "cpu:1",
        "-o",
        out,
        env=cluster,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    header, *rows = done.stdout.splitlines()[:3]
    assert header.startswith("node   status  fail  warn  vs nodes")
    assert [r.split()[0] for r in rows] == ["node1", "node2"]
    for node in ("node1", "node2"):
        (path,) = (out / "nodes" / node).glob("doctor-active.*.json")
        found = record.read(path)
        assert found["node"] == node and found["level"] == "quick"
        assert len(found["measurements"]["cpu:0"]["cpu_gemm"]["samples"]) >= 3
        assert list((out / "slurm").glob(f"doctor.*.{node}.out"))
        # the exit code is the table's: 1 only for a node that failed a check or is flagged
        status = next(r.split()[1] for r in rows if r.startswith(node))
        assert status in ("PASS", "WARN", "FAIL") and (status == "FAIL") <= (done.returncode == 1)


def test_slurm_doctor_needs_nodes(tmp_path):
    done = milarun("slurm", "doctor", "-o", tmp_path)
    assert done.returncode == 1
    assert "give --nodes N or --nodelist LIST" in done.stderr
