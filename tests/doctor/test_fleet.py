"""`slurm doctor`'s per-node table from node records (milarun.doctor.fleet): the statistics of
`report --compare-nodes` applied to the nodes' samples."""

from __future__ import annotations

import random

from milarun.doctor import fleet


def node_record(gemm: float, copy: float, seed: int, verdict: str = "PASS") -> dict:
    rng = random.Random(seed)

    def samples(value: float) -> list[float]:
        return [value * rng.gauss(1.0, 0.01) for _ in range(8)]

    measured = {
        f"cuda:{i}": {
            "gemm_bf16": {"unit": "TFLOP/s", "samples": samples(gemm)},
            "memory_bandwidth": {"unit": "GB/s", "samples": samples(copy)},
        }
        for i in range(2)
    }
    checks = [{"name": "cuda:0 gemm bf16", "status": verdict, "detail": "", "fix": None}]
    return {"verdict": verdict, "checks": checks, "measurements": measured, "seconds": 40.0}


def test_a_slow_node_is_flagged_and_the_others_pass():
    records = {f"node{i}": node_record(740.0, 2950.0, i) for i in (1, 2, 3, 10)}
    records["node3"] = node_record(370.0, 2950.0, 3)  # its GEMMs at half speed
    lines = {line.node: line for line in fleet.compare(records, {})}
    slow = lines["node3"]
    assert slow.flag == "FAIL" and slow.status == "FAIL"
    assert 0.6 < slow.ratio < 0.8 and slow.p_value < 0.01  # half the GEMM, the same copy
    assert all(lines[n].flag == "PASS" for n in ("node1", "node2", "node10"))
    (said,) = fleet.flags(list(lines.values()))
    assert said.startswith("node node3 is significantly slower than the other nodes: 0.7")
    table = fleet.table(list(lines.values()))
    assert [row.split()[0] for row in table[1:]] == ["node1", "node2", "node3", "node10"]


def test_a_node_without_a_record_fails_and_says_why():
    lines = fleet.compare(
        {"node1": node_record(740.0, 2950.0, 1), "node2": None},
        {"node2": "no record (cannot read); its output ends: Killed"},
    )
    dead = lines[1]
    assert dead.status == "FAIL" and "Killed" in dead.note and dead.ratio is None
    assert lines[0].status == "PASS" and lines[0].ratio is None  # no other node to compare
