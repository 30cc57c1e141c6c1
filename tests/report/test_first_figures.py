"""Issue 49: what a reader sees first is what is true. A busy run's score, ratio and each
busy test's perf carry the busy mark where the figure is (text and HTML); a score gets an
interval only when it is one (a test that ran once cannot be resampled)."""

from __future__ import annotations

import json
import re

import pytest
from test_busy_report import diagnostics

from conftest import milarun
from resultfactory import result, write


def folder_of(root, runs: dict[str, int], busy: set[str] = frozenset()):
    """``runs`` of each test (rate 100 + run), ``busy`` ones with 60% of their CPUs taken."""
    for test, count in runs.items():
        for r in range(count):
            others = 0.60 if test in busy else None
            data = result(test, f"{r}.0", 100.0 + r, diagnostics=diagnostics(others))
            write(root, data, f"{test}.J{r}.0.20260101-000000-{r:06d}.json")
    return root


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Weights and a baseline (made by `milarun summary`) of quick.a, quick.b and quick.c,
    made once: each test's own folder is what differs."""
    root = tmp_path_factory.mktemp("first-figures")
    tests = ("quick.a", "quick.b", "quick.c")
    weights = root / "weights.json"
    weights.write_text(json.dumps({t: {"weight": 1} for t in tests}))
    baseline = root / "baseline.json"
    made = milarun("summary", folder_of(root / "base", dict.fromkeys(tests, 3)), "-o", baseline)
    assert made.returncode == 0, made.stderr
    return weights, baseline


def scores_block(text: str) -> dict[str, str]:
    block = text.split("Scores\n------\n", 1)[1].split("\n\n", 1)[0]
    joined = re.sub(r"\n +", " ", block)  # wrapped values on one line
    return {
        k.strip(): " ".join(v.split())
        for k, _, v in (ln.partition(":") for ln in joined.splitlines())
    }


def perf_cell(text: str, test: str) -> str:
    row = next(ln for ln in text.splitlines() if ln.startswith(test + " "))
    return row


def test_a_busy_run_is_marked_beside_its_score_ratio_and_busy_perf(tmp_path, shared):
    tests = {"quick.a": 3, "quick.b": 3, "quick.c": 3}
    run = folder_of(tmp_path / "run", tests, busy={"quick.a"})
    weights, baseline = shared
    html = tmp_path / "report.html"
    done = milarun("report", run, "--weights", weights, "--compare", baseline, "--html", html)
    assert done.returncode == 0, done.stderr
    scores = scores_block(done.stdout)
    assert scores["Score"].endswith("[busy: 1 of 3 tests, not verdict-grade]"), scores
    assert scores["Ratio"].endswith("[busy: 1 of 3 tests, not verdict-grade]"), scores
    table = done.stdout.split("Comparison with the baseline", 1)
    assert "busy" in perf_cell(table[0], "quick.a")
    assert "busy" not in perf_cell(table[0], "quick.b")
    assert "busy" in perf_cell(table[1], "quick.a")  # its ratio to the baseline
    page = html.read_text()
    row = page.split('<td class="name">quick.a</td>', 1)[1].split("</tr>", 1)[0]
    assert '<span class="busy"' in row
    quiet = page.split('<td class="name">quick.b</td>', 1)[1].split("</tr>", 1)[0]
    assert "busy" not in quiet
    scores_html = page.split('<table id="scores">', 1)[1].split("</table>", 1)[0]
    assert scores_html.count('<span class="busy">busy: 1 of 3 tests') == 2  # score, ratio


def test_a_quiet_run_has_no_mark(tmp_path, shared):
    tests = {"quick.a": 3, "quick.b": 3, "quick.c": 3}
    weights, baseline = shared
    done = milarun(
        "report", folder_of(tmp_path / "run", tests), "--weights", weights, "--compare", baseline
    )
    assert done.returncode == 0, done.stderr
    assert "busy" not in done.stdout
    scores = scores_block(done.stdout)
    assert re.fullmatch(r"[\d,.]+ to [\d,.]+", scores["Score 95% CI"]), scores
    assert "95% CI" in scores["Ratio"]


def test_no_interval_when_a_scored_test_ran_once(tmp_path, shared):
    tests = {"quick.a": 3, "quick.b": 1, "quick.c": 1}
    weights, baseline = shared
    run = folder_of(tmp_path / "run", tests)
    done = milarun("report", run, "--weights", weights, "--compare", baseline)
    assert done.returncode == 0, done.stderr
    scores = scores_block(done.stdout)
    assert scores["Score 95% CI"] == "- no interval: 2 of 3 tests ran once", scores
    assert (
        "95% CI" not in scores["Ratio"] and "no interval: 2 of 3 tests ran once" in scores["Ratio"]
    )
    records = json.loads(milarun("report", run, "--weights", weights, "--format", "json").stdout)[
        "scores"
    ]
    assert records["score_ci95"] is None and records["score"] is not None
    assert records["no_interval"] == "no interval: 2 of 3 tests ran once"


def interrupted_manifest(folder, instances):
    """The manifest of a run stopped by Ctrl-C before any of ``instances`` ended."""
    from milarun.results import manifest

    data = {"kind": manifest.KIND, "status": "interrupted", "reason": "SIGINT",
            "started_at": 1.7e9, "planned": sorted({t for t, _ in instances}),
            "instances": [list(p) for p in instances], "ended": []}  # fmt: skip
    path = folder / f"{manifest.PREFIX}20260101-000000-000000{manifest.SUFFIX}"
    path.write_text(json.dumps(data))


def test_the_cut_short_list_names_only_instances_without_a_result(tmp_path):
    """Ctrl-C, then a rerun into the same folder that measured quick.a on both devices and
    quick.b on one: only quick.b's other instance is still without a result."""
    run = tmp_path / "run"
    for test, job in (("quick.a", "0.0"), ("quick.a", "0.1"), ("quick.b", "0.0")):
        write(run, result(test, job, 100.0, diagnostics=diagnostics(None)))
    pairs = [("quick.a", "0.0"), ("quick.a", "0.1"), ("quick.b", "0.0"), ("quick.b", "0.1")]
    interrupted_manifest(run, pairs)
    done = milarun("report", run)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "was cut short (SIGINT): no result for quick.b (J0.1)" in text, done.stdout
    assert "quick.a (J" not in text
    write(run, result("quick.b", "0.1", 100.0, diagnostics=diagnostics(None)))
    done = milarun("report", run)
    text = " ".join(done.stdout.split())
    assert "was cut short (SIGINT): each of its tests has a result" in text, done.stdout
    assert "no result for" not in text


def test_price_per_score_in_thousands_format(tmp_path, shared):
    tests = {"quick.a": 3, "quick.b": 3, "quick.c": 3}
    weights, _ = shared
    run = folder_of(tmp_path / "run", tests)
    done = milarun("report", run, "--weights", weights, "--price", "250000000")
    assert done.returncode == 0, done.stderr
    rpp = scores_block(done.stdout)["RPP (Price / Score)"]
    assert re.fullmatch(r"2,4\d\d,\d\d\d", rpp), rpp  # was 2.488e+06


def test_significant_figures_never_in_e_notation():
    from milarun.report.render import format as fmt

    shown = {v: fmt.sig(v) for v in (999.6, 0.00001234, 0.364, 12_345.6)}
    assert shown == {999.6: "1,000", 0.00001234: "0.0000123", 0.364: "0.364", 12_345.6: "12,346"}
