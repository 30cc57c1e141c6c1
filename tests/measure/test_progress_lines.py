"""Progress of a running test: tagged JSON for the supervisor, a plain line for a person."""

from __future__ import annotations

import json
import types

from milarun.machine import watchdog
from milarun.measure.runner import PROGRESS_TAG, progress_printer


def fake_log(rates):
    rule = types.SimpleNamespace(min_slices=12)
    return types.SimpleNamespace(
        name="train", count=640, max_count=None, rates=rates, length_rule=rule, in_block=3.0
    )


def test_under_jobs_a_tagged_line_on_stdout(capsys, monkeypatch):
    monkeypatch.setenv(watchdog.SUPERVISOR_ENV, "1")
    progress_printer(min_interval=0)(fake_log([100.0, 200.0]))
    out, err = capsys.readouterr()
    assert out.startswith(PROGRESS_TAG + " ") and err == ""
    assert json.loads(out[len(PROGRESS_TAG) :])["rate"] == 200.0


def test_by_hand_a_plain_line_on_stderr(capsys, monkeypatch):
    monkeypatch.delenv(watchdog.SUPERVISOR_ENV, raising=False)
    report = progress_printer(min_interval=3600)
    report(fake_log([100.0, 1234.5]))
    report(fake_log([100.0, 1234.5, 1.0]))  # within the interval: nothing more
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "  train: 1,234.50 examples/s, 2/12 slices, 640 examples\n"
