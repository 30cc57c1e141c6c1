"""Inference results in the results database (issue 48): an inference test's comparison key
(engine, version, precision, lengths, concurrency) makes its own history series, as it makes
its own report line, and its latency figures and output tokens/s are kept and shown."""

from __future__ import annotations

from conftest import ROOT, milarun
from milarun.history import ingest, store
from milarun.history.models import Result
from resultfactory import run_folder

DAY = 86_400.0
T0 = 1_767_225_600.0  # 2026-01-01
H200 = ROOT / "tests" / "data" / "gpu-runs" / "h200-inference-2026-11-28"


def served(precision: str, ttft_p99: float) -> dict:
    """An llm-serve result's settings and latency metrics (measure.loadgen's names)."""
    settings = {
        "engine": "vllm",
        "engine_version": "0.11.0",
        "precision": precision,
        "kv_dtype": precision,
        "input_len": 1024,
        "output_len": 256,
        "concurrency": 16,
    }
    figures = {"ttft_p50_ms": 80.0, "tpot_p50_ms": 9.0, "tpot_p99_ms": 14.0}
    return {
        "efficiency": {"settings": settings},
        "metrics": {**figures, "ttft_p99_ms": ttft_p99, "goodput_percent": 97.5},
    }


def test_the_h200_inference_results_are_ingested_with_their_key(tmp_path):
    """The real H200 folder: each llm-decode result (eager, compiled) keeps its key in words
    and its output tokens/s; the failed llm-serve keeps its key and no figure."""
    engine = store.open_db(f"sqlite:///{tmp_path / 'history.sqlite'}")
    ingest.ingest(engine, ingest.read_run(H200, machine="h200"))
    with store.session(engine) as session:
        rows = session.query(Result).order_by(Result.finished_at).all()
        found = [(r.test, r.inference, r.rate, r.output_tokens_per_s) for r in rows]
    engine.dispose()
    decode = [f for f in found if f[0] == "llm_decode"]
    assert len(decode) == 2 and len({f[1] for f in decode}) == 2  # eager, graphs: two keys
    assert all(f[1].startswith("transformers 5.17.0 bf16") for f in decode)
    assert all(f[2] is not None and f[3] == f[2] for f in decode)
    assert any("graphs" in f[1] for f in decode)
    serve = [f for f in found if f[0] == "llm_serve"]
    assert serve and all(f[2] is None and f[3] is None for f in serve)


def test_history_keeps_fp8_and_bf16_apart_and_shows_latency(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    for day in range(2):
        for precision, ttft in (("bf16", 150.0 + day), ("fp8", 120.0)):
            folder = run_folder(
                tmp_path / f"{precision}{day}",
                {"inference.llm-serve": [5000.0 if precision == "bf16" else 5800.0]},
                T0 + day * DAY,
                **served(precision, ttft),
            )
            assert milarun("db", "ingest", folder, "--db", url, "--machine", "m").returncode == 0
    done = milarun("history", "--db", url)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    bf16 = "inference.llm-serve [vllm 0.11.0 bf16 1024/256 x16] @ m"
    fp8 = "inference.llm-serve [vllm 0.11.0 fp8 1024/256 x16] @ m"
    assert bf16 in text and fp8 in text
    blocks = {b.splitlines()[0]: b.splitlines()[1:] for b in text.split("\n\n")}
    header, *points = blocks[bf16]
    assert "tokens/s out" in header and "TTFT p50" in header and "goodput" in header
    assert len(points) == 2 and all("5,000" in p and "98%" in p for p in points)
    assert "151" in points[1] and "150" in points[0]  # each day's TTFT p99
    assert len(blocks[fp8]) == 3 and "5,800" in blocks[fp8][1]
