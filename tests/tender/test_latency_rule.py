"""The tender's latency limits on the inference tests: `tender init` writes them, verify's
``latency`` rule holds each successful inference run to them (a real llm-serve run against
a server on loopback, and the real H200 llm-decode result, which has no TTFT percentile)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import DATA, ROOT
from milarun import errors
from milarun.results import read
from milarun.results.folder import Loaded
from milarun.results.tender_rules import TenderRules
from milarun.tender import rules
from milarun.tender.latency_rules import latency
from milarun.tender.rule import Bid

sys.path.insert(0, str(ROOT / "tests" / "models"))
import badservers  # noqa: E402

from modelrun import describe, only_result, run_model  # noqa: E402

DECODE = (
    DATA / "gpu-runs" / "h200-inference-2026-11-28" / "llm_decode.J0.20261128-194110-861389.json"
)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("served")
    with badservers.serving("good") as url:
        done = run_model(
            "run", "milabench.models.llm_serve:main", "-o", out, "--", "--url", url,
            "--model", "tiny", "--input-len", "16", "--output-len", "8", "--min-slices", "6",
        )  # fmt: skip
    assert done.returncode == 0, describe(done)
    return only_result(out)


def bid_of(results: list[dict], **latency_limits: float) -> Bid:
    data = rules.make_tender(
        "quick", None, TenderRules(repeat=1, **latency_limits), names=["llm-serve"]
    )
    return Bid(
        rules.Tender(data, "0" * 64), Path("."), {}, {}, Loaded(Path("."), read.views(results)), {}
    )


def test_no_limit_no_constraint(served):
    check = latency(bid_of([served]))
    assert check.ok and check.evidence == "the tender sets no latency limit"


def test_a_run_within_the_limits_passes_and_one_beyond_them_fails(served):
    ttft = served["metrics"]["ttft_p99_ms"]
    ok = latency(bid_of([served], max_ttft_p99_ms=ttft * 10, min_goodput_percent=100))
    assert ok.ok, ok.evidence
    assert ok.evidence.startswith("1 inference run(s) within TTFT p99 <= ")
    tight = latency(bid_of([served], max_ttft_p99_ms=ttft / 10))
    assert not tight.ok
    assert tight.evidence.startswith(f"runs beyond TTFT p99 <= {ttft / 10:g} ms: llm_serve J0: ")


def test_a_decode_run_without_the_figure_is_named_not_failed():
    decode = json.loads(DECODE.read_text())
    check = latency(bid_of([decode], max_ttft_p99_ms=2000))
    assert check.ok and "without the figure: llm_decode J0 (ttft_p99_ms)" in check.evidence


def test_a_limit_out_of_range_is_refused():
    with pytest.raises(errors.TenderError, match=r"--min-goodput 150.0: must be a number above 0"):
        rules.make_tender("quick", None, TenderRules(repeat=1, min_goodput_percent=150.0))
    written = rules.make_tender("quick", None, TenderRules(repeat=1, max_tpot_p99_ms=100.0))
    assert written["max_tpot_p99_ms"] == 100.0 and written["max_ttft_p99_ms"] is None
    assert rules.tender_problem(written) is None
    assert rules.tender_problem({**written, "max_ttft_p99_ms": -1}) == (
        "'max_ttft_p99_ms' -1 is not a number above 0, at most 3.6e+06"
    )
