"""The report of inference tests, on the real H200 results of llm-decode (tests/data/gpu-runs/
h200-inference-2026-11-28): the inference block (text, JSON, HTML) beside the usual tables,
MBU and joules per token, and like with like: another engine setting (CUDA graphs, fp8 KV)
is another line, never averaged in."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from conftest import DATA, milarun
from milarun.report import build, summary
from milarun.report.render import text as render_text
from milarun.results.inference import InferenceRun

H200 = DATA / "gpu-runs" / "h200-inference-2026-11-28"
EAGER = "llm_decode.J0.20261128-194110-861389.json"
GRAPHS = "llm_decode.J0.20261128-194316-197640.json"


def load(name: str) -> dict:
    return json.loads((H200 / name).read_text())


def test_the_h200_decode_results_read_as_inference():
    eager = InferenceRun.from_result(load(EAGER)["efficiency"]["settings"], load(EAGER)["metrics"])
    assert eager is not None
    assert eager.describe() == "transformers 5.17.0 bf16 1024/256 x1"
    assert eager.figures["tpot_ms"] == pytest.approx(30.23, abs=0.01)
    assert eager.figures["mbu_percent"] == pytest.approx(10.45, abs=0.01)
    graphs = InferenceRun.from_result(
        load(GRAPHS)["efficiency"]["settings"], load(GRAPHS)["metrics"]
    )
    assert graphs is not None and graphs.cuda_graphs and graphs.key() != eager.key()


def test_the_report_shows_the_inference_block_only_for_inference_tests(tmp_path):
    shutil.copy(H200 / EAGER, tmp_path)
    shutil.copy(H200 / GRAPHS, tmp_path)
    done = milarun("report", tmp_path, "--html", tmp_path / "r.html")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "Inference (mean of runs; times in ms; perf = output tokens/s)" in text
    block = text[text.index("Inference (mean") :]
    assert "42.1" in block and "10.4" in block  # MBU% of the compiled and eager runs
    assert "transformers 5.17.0 bf16 1024/256 x1 graphs" in block
    assert "2.97" in block  # J/token of the compiled run (the GPU's energy / its tokens)
    html = (tmp_path / "r.html").read_text()
    assert 'id="inference"' in html and "MBU%" in html
    records = json.loads(milarun("report", tmp_path, "--format", "json").stdout)
    assert set(records["inference"]) == {
        "llm_decode",
        "llm_decode [--compile no --sweep, transformers 5.17.0 bf16 1024/256 x1 graphs]",
    }


def test_fp8_and_bf16_never_share_a_line():
    bf16 = load(GRAPHS)
    fp8 = copy.deepcopy(bf16)
    fp8["efficiency"]["settings"]["kv_dtype"] = "fp8"
    found = summary.summarize([bf16, fp8])
    assert len(found) == 2
    other = next(k for k in found if k != "llm_decode")
    assert "kv fp8" in other and found[other]["variant_of"] == "llm_decode"


def test_a_report_without_inference_tests_has_no_inference_block():
    training = json.loads(
        next(
            (DATA / "gpu-runs" / "h100-2026-11-28" / "modern").glob("modern.gemm*.json")
        ).read_text()
    )
    report = build.build_report(summary.summarize([training]))
    assert report.inference.empty
    assert "Inference" not in render_text.to_text(report)
    assert "inference" not in render_text.to_records(report)
