"""summary and report commands: formats, bad input, CI gate, and no torch needed."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from conftest import ROOT, milarun
from resultfactory import result, write


@pytest.fixture
def results_dir(tmp_path):
    res = tmp_path / "results"
    for i, rate in enumerate([100.0, 102.0, 98.0, 100.0]):
        write(res, result("suite.alpha", f"{i // 2}.{i % 2}", rate, device=f"cuda:{i % 2}"))
    for i, rate in enumerate([10.0, 10.5]):
        write(res, result("suite.beta", f"0.{i}", rate, device=f"cuda:{i}"))
    return res


def _weights(tmp_path, mapping):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(mapping))
    return path


def test_summary_baseline_format(results_dir, tmp_path):
    # A rerun result counts; a scaling result with two ranks counts once: the mean per rank
    # (the legacy unit), with all ranks together beside it as throughput.
    write(
        results_dir,
        result("suite.alpha", "0.0", 104.0, rerun_of="/x.json", device="cuda:0"),
        "suite.alpha.J0.0.20260102-000000-000000.json",
    )
    write(
        results_dir,
        result("suite.scaling.2", "0", None, ranks=[40.0, 41.0], device="cuda:0,cuda:1"),
    )
    write(
        results_dir,
        result("suite.gamma", "0.0", None, failure={"kind": "timeout", "message": "too slow"}),
    )
    out = tmp_path / "summary.json"
    done = milarun("summary", results_dir, "-o", out)
    assert done.returncode == 0, done.stderr
    summ = json.loads(out.read_text())
    alpha = summ["suite.alpha"]
    assert alpha["n"] == 5 and alpha["failures"] == 0
    assert alpha["train"]["mean"] == pytest.approx(100.8)
    values = [100, 102, 98, 100, 104]
    pop = (sum((v - 100.8) ** 2 for v in values) / 5) ** 0.5
    assert alpha["train"]["std"] == pytest.approx(pop)
    assert alpha["total"]["mean"] == pytest.approx(30.0)  # program time, legacy meaning
    assert set(alpha["pergpu"]) == {"cuda:0", "cuda:1"}
    assert alpha["pergpu"]["cuda:0"]["n"] == 3
    scaling = summ["suite.scaling.2"]
    assert scaling["n"] == 1 and scaling["train"]["mean"] == pytest.approx(40.5)
    assert scaling["throughput"]["mean"] == pytest.approx(81.0)
    assert "throughput" not in alpha
    assert scaling["pergpu"] == {}
    gamma = summ["suite.gamma"]
    assert gamma["failures"] == 1 and gamma["train"]["mean"] is None
    assert gamma["failure_kinds"] == {"timeout": 1}
    # Never overwrites.
    again = milarun("summary", results_dir, "-o", out)
    assert again.returncode == 1 and "file exists" in again.stderr


def test_empty_results_dir(tmp_path):
    (tmp_path / "empty").mkdir()
    for command in ("summary", "report"):
        done = milarun(command, tmp_path / "empty")
        assert done.returncode == 1
        assert "no milarun results found" in done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_weights_name_missing_and_unweighted_tests(results_dir, tmp_path):
    weights = _weights(tmp_path, {"suite.alpha": 4, "suite.ghost": {"weight": 8}})
    done = milarun("report", results_dir, "--weights", weights)
    assert done.returncode == 0, done.stderr
    assert "no results: suite.ghost" in done.stdout
    assert "not in the weights (not scored): suite.beta" in done.stdout
    assert "Missing:" in done.stdout and "33%" in done.stdout  # coverage 4 of 12


def test_bad_weights_and_baseline(results_dir, tmp_path):
    weights = _weights(tmp_path, {"suite.alpha": "heavy"})
    done = milarun("report", results_dir, "--weights", weights)
    assert done.returncode == 1
    assert f"{weights}: test 'suite.alpha': weight 'heavy'" in done.stderr
    baseline = tmp_path / "base.json"
    baseline.write_text(json.dumps({"suite.alpha": {"n": 3, "failures": 0}}))
    done = milarun("report", results_dir, "--compare", baseline)
    assert done.returncode == 1
    assert f"{baseline}: test 'suite.alpha' has no key 'train'" in done.stderr
    assert "Traceback" not in done.stderr


def test_zero_negative_and_nan_perf_are_failures(tmp_path):
    res = tmp_path / "r"
    write(res, result("s.t", "0.0", 10.0))
    write(res, result("s.t", "0.1", None, rates=[-5.0] * 25))
    write(res, result("s.t", "0.2", None, rates=[float("nan")] * 25))
    baseline = tmp_path / "base.json"
    baseline.write_text(
        json.dumps({"s.t": {"n": 2, "failures": 0, "train": {"n": 2, "mean": 0.0, "std": 0.0}}})
    )
    done = milarun("report", res, "--compare", baseline, "--format", "json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)["tests"]["s.t"]
    assert (row["n"], row["fail"]) == (3, 2)
    assert row["perf_base"] is None and row["perf_ratio"] is None


def test_fail_below_gates_on_the_score_ratio(results_dir, tmp_path):
    weights = _weights(tmp_path, {"suite.alpha": 1, "suite.beta": 1})
    base = tmp_path / "base.json"
    assert milarun("summary", results_dir, "-o", base).returncode == 0
    ok = milarun(
        "report", results_dir, "--weights", weights, "--compare", base, "--fail-below", "0.95"
    )
    assert ok.returncode == 0, ok.stderr
    assert "no significant change" in ok.stdout
    slow = tmp_path / "slow"
    for i, rate in enumerate([80.0, 81.0, 79.0, 80.0]):
        write(slow, result("suite.alpha", f"0.{i}", rate))
    for i, rate in enumerate([8.0, 8.1]):
        write(slow, result("suite.beta", f"0.{i}", rate))
    gate = milarun(
        "report", slow, "--weights", weights, "--compare", results_dir, "--fail-below", "0.95"
    )
    assert gate.returncode == 3
    assert "below --fail-below 0.95" in gate.stderr
    assert "slower" in gate.stdout
    usage = milarun("report", slow, "--fail-below", "0.9")
    assert usage.returncode == 1 and "needs --compare" in usage.stderr


def test_text_fits_100_columns(results_dir, tmp_path):
    long = "suite." + "a_very_long_benchmark_name_that_keeps_going" * 2
    for i in range(2):
        write(results_dir, result(long, f"0.{i}", 5.0 + i, device=f"cuda:{i}"))
    weights = _weights(tmp_path, {"suite.alpha": 1, long: 2})
    done = milarun(
        "report",
        results_dir,
        "--weights",
        weights,
        "--compare",
        results_dir,
        "--compare-gpus",
        "--price",
        "250000",
        "--penalize-variance",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    for expected in (
        "Benchmark results",
        "Scores",
        "Failure rate:",
        "Score:",
        "RPP (Price / Score):",
        "GPU comparison (mean",
        "perf_ratio_adj",
    ):
        assert expected in done.stdout


def test_csv_and_json_formats(results_dir):
    write(
        results_dir,
        result(
            "suite.gamma",
            "0.0",
            None,
            error="line 1\nCUDA error: boom",
            failure={"kind": "crash", "message": "died of SIGSEGV"},
        ),
    )
    done = milarun("report", results_dir, "--format", "csv")
    assert done.returncode == 0, done.stderr
    # the per-test table, then one block per part of the runs, each after a blank line
    per_test, failed, isolation = done.stdout.split("\n\n")
    table = pd.read_csv(io.StringIO(per_test), index_col="test")
    assert table.loc["suite.alpha", "perf"] == pytest.approx(100.0)
    assert {"n", "fail", "perf", "ci_low", "ci_high", "std%", "perf_adj"} <= set(table.columns)
    failures = pd.read_csv(io.StringIO(failed))
    assert failures.loc[0, ["test", "kind", "message"]].tolist() == [
        "suite.gamma",
        "crash",
        "died of SIGSEGV",
    ]
    assert failures.loc[0, "tail"] == "line 1\nCUDA error: boom"
    rows = pd.read_csv(io.StringIO(isolation))
    assert rows.groupby("device")["runs"].sum().to_dict() == {"cpu:0": 1, "cuda:0": 3, "cuda:1": 3}
    data = json.loads(milarun("report", results_dir, "--format", "json").stdout)
    assert data["tests"]["suite.beta"]["perf"] == pytest.approx(10.25)
    # what only the page showed: failed runs with their log, isolation, systems, series
    assert data["failed_runs"][0]["tail"].endswith("CUDA error: boom")
    assert sum(i["runs"] for i in data["isolation"]) == 7
    assert data["systems"][0]["host"] == "node1"
    alpha = data["series"]["suite.alpha"]
    assert len(alpha) == 4 and {s["device"] for s in alpha} == {"cuda:0", "cuda:1"}
    text = milarun("report", results_dir).stdout
    assert "Failed runs" in text and "CUDA error: boom" in text and "Isolation" in text
    bad = milarun("report", results_dir, "--format", "xml")
    assert bad.returncode == 1 and "--format xml" in bad.stderr


def test_report_and_summary_work_without_torch(results_dir, tmp_path):
    """An analyst's laptop has no torch: importing it must not be needed."""
    html = tmp_path / "r.html"
    code = "\n".join(
        [
            "import sys",
            "class NoTorch:",
            "    def find_spec(self, name, path=None, target=None):",
            "        if name.split('.')[0] in ('torch', 'torchvision'):",
            "            raise ImportError(f'{name} is not installed here')",
            "sys.meta_path.insert(0, NoTorch())",
            "from milarun.cli.main import main",
            "try:",
            f"    main(['report', {str(results_dir)!r}, '--html', {str(html)!r}])",
            "finally:",
            "    assert 'torch' not in sys.modules",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    # 6 runs, none failed; the page is the report's (its marker), with both tests in it
    assert re.search(r"^Failure rate: +0.00% \(PASS\)  0 of 6 runs$", done.stdout, re.M)
    page = html.read_text()
    assert "<!-- milarun report -->" in page and "suite.alpha" in page and "suite.beta" in page


def test_html_never_overwrites_a_foreign_file(results_dir, tmp_path):
    precious = tmp_path / "notes.html"
    precious.write_text("<html>my notes</html>")
    done = milarun("report", results_dir, "--html", precious)
    assert done.returncode == 1 and "not a milarun report" in done.stderr
    assert precious.read_text() == "<html>my notes</html>"
    page = tmp_path / "report.html"
    assert milarun("report", results_dir, "--html", page).returncode == 0
    assert milarun("report", results_dir, "--html", page).returncode == 0  # ours: replaced


def test_scaling_table_per_rank_total_and_efficiency(tmp_path):
    """scaling.k is scored as the mean per rank (legacy unit); the total over the k ranks
    and the efficiency against k x scaling.1 are shown beside it."""
    res = tmp_path / "res"
    write(res, result("suite.scaling.1", "0", None, ranks=[50.0], device="cuda:0"))
    write(res, result("suite.scaling.2", "0", None, ranks=[40.0, 41.0], device="cuda:0,cuda:1"))
    data = json.loads(milarun("report", res, "--format", "json").stdout)
    assert data["tests"]["suite.scaling.2"]["perf"] == pytest.approx(40.5)
    two = data["scaling"]["suite.scaling.2"]
    assert two["k"] == 2 and two["per_rank"] == pytest.approx(40.5)
    assert two["total"] == pytest.approx(81.0)
    assert two["efficiency"] == pytest.approx(81.0 / (2 * 50.0))
    text = milarun("report", res).stdout
    assert "Scaling (examples/s; per rank" in text and "81.0%" in text


def test_natural_rate_beside_the_legacy_one(tmp_path):
    """A test counted in its legacy unit (atari: 16 per PPO iteration of 2,048 agent steps)
    shows its rate in the natural unit too: perf x per_example, in text and JSON."""
    res = tmp_path / "res"
    for i, rate in enumerate([14.0, 16.0]):
        write(
            res,
            result(
                "suite.atari",
                f"0.{i}",
                rate,
                metrics={"loss": 0.5, "per_example.agent_steps": 128.0},
            ),
        )
    for i, rate in enumerate([900.0, 1100.0]):
        write(
            res,
            result(
                "suite.toy_lstm",
                f"0.{i}",
                rate,
                metrics={"loss": 0.1, "per_example.sequences": 0.97},
            ),
        )
    write(res, result("suite.vae", "0.0", 50.0))
    data = json.loads(milarun("report", res, "--format", "json").stdout)
    atari, lstm = data["natural"]["suite.atari"], data["natural"]["suite.toy_lstm"]
    assert data["tests"]["suite.atari"]["perf"] == pytest.approx(15.0)  # scored: legacy unit
    assert (atari["unit"], atari["per_example"]) == ("agent_steps", 128.0)
    assert atari["natural"] == pytest.approx(15.0 * 128.0)
    assert lstm["natural"] == pytest.approx(1000.0 * 0.97)
    assert "suite.vae" not in data["natural"]
    text = milarun("report", res).stdout
    section = text[text.index("Natural units") :]
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "1,920.00" in section and "agent_steps" in section and "128" in section
    assert "970.00" in section and "sequences" in section and "suite.vae" not in section
