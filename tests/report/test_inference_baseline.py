"""The H200 inference baseline (milarun/baselines/inference/h200.json, `milarun summary` of the
real H200 results in tests/data/gpu-runs/h200-inference-2026-11-28): its figures are the runs'
and the report of that folder compares against it (issue 48)."""

from __future__ import annotations

import json

import pytest

from conftest import DATA, ROOT, milarun

H200 = DATA / "gpu-runs" / "h200-inference-2026-11-28"
BASELINE = ROOT / "milarun" / "baselines" / "inference" / "h200.json"
COMPILED_1B = "inference.llm-decode-1b-compiled"


def test_the_baseline_holds_the_h200_decode_runs():
    found = json.loads(BASELINE.read_text())
    one_b = found[COMPILED_1B]
    assert one_b["train"]["mean"] == pytest.approx(515.1, abs=0.1)  # output tokens/s, batch 1
    assert one_b["inference"]["tpot_ms"] == pytest.approx(1.94, abs=0.01)
    assert one_b["inference"]["mbu_percent"] == pytest.approx(26.9, abs=0.1)
    assert found["llm_decode"]["inference"]["engine"] == "transformers 5.17.0 bf16 1024/256 x1"
    assert not [name for name in found if name.startswith("llm_serve")]  # failed: no figure


def test_the_h200_folder_reports_against_its_baseline():
    done = milarun("report", H200, "--compare", "inference/h200", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["baseline"].endswith("baselines/inference/h200.json")
    compared = {k: v for k, v in report["tests"].items() if v.get("perf_ratio") is not None}
    assert COMPILED_1B in compared and "llm_decode" in compared and len(compared) == 3
    assert all(v["perf_ratio"] == pytest.approx(1.0) for v in compared.values())
    assert report["inference"][COMPILED_1B]["engine"].endswith("graphs")
