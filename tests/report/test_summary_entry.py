"""The summary entry is declared once (report.summary_entry.SummaryEntry): what report.summary
writes for the real GPU runs reads back into it and writes the same bytes, an older baseline's
entry reads as far as it holds, and the report's tables read entries through it."""

from __future__ import annotations

import json

import pytest

from conftest import DATA, ROOT
from milarun.report import tables
from milarun.report.summary import summarize
from milarun.report.summary_entry import SummaryEntry, entries
from milarun.results.folder import load_dir

RUNS = DATA / "gpu-runs"
FOLDERS = [
    RUNS / "h100-2026-11-28" / "modern",
    RUNS / "h100-2026-11-28" / "modern-llm-compile",
    RUNS / "h200-inference-2026-11-28",
    RUNS / "h200-startup-2026-11-28",
]


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_a_real_summary_entry_reads_and_writes_back_the_same_bytes(folder):
    summary = summarize(load_dir(folder).results)
    assert summary
    for entry in summary.values():
        back = (SummaryEntry.from_dict(entry) or SummaryEntry()).to_dict()
        assert json.dumps(back) == json.dumps(entry)


def test_an_older_baseline_entry_reads_as_far_as_it_holds():
    """The shipped 2020 V100 baseline: no quality block's clocks, no rates of its own."""
    baseline = json.loads((ROOT / "milarun" / "baselines" / "standard" / "v100.json").read_text())
    typed = entries(baseline)
    assert typed.keys() == baseline.keys()
    for test, entry in typed.items():
        assert entry.n == baseline[test]["n"] and entry.mean_rate == baseline[test]["train"]["mean"]
        assert entry.measured.sm_clock is None


def test_an_edited_entry_reads_its_wrong_values_as_absent():
    entry = SummaryEntry.from_dict(
        {"n": "3", "failures": 1, "train": {"n": 2, "mean": "fast"}, "pergpu": {"0": 7}}
    )
    assert entry is not None and (entry.n, entry.failures) == (0, 1)
    assert entry.train is not None and entry.mean_rate is None and entry.pergpu == {}
    assert entry.rates is None and entry.measured.flagged is None


def test_the_scaling_table_reads_the_typed_entries():
    summary = {
        "s.t.1": {"n": 1, "failures": 0, "train": {"mean": 10.0}, "throughput": {"mean": 10.0}},
        "s.t.2": {"n": 1, "failures": 0, "train": {"mean": 9.0}, "throughput": {"mean": 18.0}},
    }
    table = tables.scaling_table(summary)
    assert list(table["per_rank"]) == [10.0, 9.0] and list(table["efficiency"]) == [1.0, 0.9]
