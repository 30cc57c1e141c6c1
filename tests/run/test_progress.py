"""The progress board reads tagged lines from instance logs; what it prints."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from rich.console import Console

import resultfactory
from conftest import ROOT
from milarun.run.progress import MAX_LINE, PROGRESS_TAG, ProgressBoard, finished_line


def test_board_reads_progress_and_streams_output(tmp_path):
    log = tmp_path / "t.log"
    inst = SimpleNamespace(
        log_path=log, name="quick.t", job_id="0.1", started=0.0, tag="quick.t J0.1 cpu:1"
    )
    out = io.StringIO()
    board = ProgressBoard(out, interval=0.0, verbose=True)
    board.update([inst])  # no log yet: nothing breaks
    progress = {"timer": "train", "count": 500, "max_count": 2000, "rate": 100.0}
    log.write_text(f"hello\n{PROGRESS_TAG} {json.dumps(progress)}\npart")
    board.update([inst])
    text = out.getvalue()
    assert "[quick.t J0.1] hello" in text
    assert PROGRESS_TAG not in text  # progress lines are parsed, not echoed
    line = board.line(inst, now=30.0)
    assert "100.0 ex/s" in line and "500/2,000" in line and "ETA 15s" in line
    with open(log, "a") as f:
        f.write("ial line\n")
    board.update([inst])
    assert "[quick.t J0.1] partial line" in out.getvalue()  # split writes are joined


def test_a_count_in_a_unit_and_a_test_past_its_window_read_as_such(tmp_path):
    """gemm counts TFLOPs (6755.399441055731 was printed raw, then 6,755.4: a whole number
    with separators reads best) and sweeps its precisions and shapes after its window (the
    board said 20/22 slices for 21 s)."""
    log = tmp_path / "t.log"
    inst = SimpleNamespace(log_path=log, name="m.gemm", job_id="0", started=0.0, tag="m.gemm J0")
    board = ProgressBoard(io.StringIO(), interval=0.0, verbose=False)
    progress = {"count": 6755.399441055731, "rate": 669.8, "slices": 20, "min_slices": 22}
    log.write_text(f"{PROGRESS_TAG} {json.dumps(progress)}\n")
    board.read([inst])
    line = board.line(inst, now=10.0)
    assert " 6,755 " in f"{line} " and "6,755." not in line and "20/22 slices" in line
    assert board.progress(inst, 10.0).count == "6,755"  # the live table's cell
    with open(log, "a") as f:
        f.write(f"{PROGRESS_TAG} {json.dumps({**progress, 'slices': 23, 'finished': True})}\n")
    board.read([inst])
    line = board.line(inst, now=31.0)
    assert "window measured  23/22 slices, the test goes on  (31s)" in line
    assert board.progress(inst, 31.0).state == "after its window"


def test_a_runaway_log_is_read_from_its_end_within_bounded_memory(tmp_path):
    # 200 MB in one unterminated line, then a progress line: the board takes the progress
    # and never holds more than MAX_READ + MAX_LINE of the log
    log = tmp_path / "t.log"
    inst = SimpleNamespace(log_path=log, name="q.t", job_id="0", started=0.0, tag="q.t J0")
    board = ProgressBoard(io.StringIO(), interval=0.0, verbose=False)
    with open(log, "wb") as f:
        f.truncate(200 * 2**20)  # sparse: no disk used
    progress = {"timer": "train", "count": 7, "rate": 3.0}
    with open(log, "a") as f:
        f.write(f"\n{PROGRESS_TAG} {json.dumps(progress)}\n" + "y" * 300_000)
    board.read([inst])
    assert "3.0 ex/s" in board.line(inst, now=1.0)
    watch = board.watches[log]
    assert watch.offset == log.stat().st_size
    assert len(watch.partial) <= MAX_LINE


def test_eta_follows_the_slices_when_no_count_is_asked(tmp_path):
    log = tmp_path / "t.log"
    inst = SimpleNamespace(
        log_path=log, name="quick.t", job_id="0.0", started=0.0, tag="quick.t J0.0 cpu:0"
    )
    board = ProgressBoard(io.StringIO(), interval=0.0)
    progress = {
        "timer": "train",
        "count": 500,
        "max_count": None,
        "slices": 4,
        "min_slices": 12,
        "rate": 100.0,
    }
    log.write_text(f"{PROGRESS_TAG} {json.dumps(progress)}\n")
    board.update([inst])
    line = board.line(inst, now=10.0)
    assert "4/12 slices" in line and " 500 " in line and "ETA 4s" in line  # 8 x 0.5 s
    # with a count too, the later of the two decides
    progress.update(max_count=2000)
    log.write_text(f"{PROGRESS_TAG} {json.dumps(progress)}\n")
    board2 = ProgressBoard(io.StringIO(), interval=0.0)
    board2.update([inst])
    assert "500/2,000" in board2.line(inst, now=10.0) and "ETA 15s" in board2.line(inst, now=10.0)


def _instance(tmp_path, job_id="0.0", label="cpu:0", **fields):
    return SimpleNamespace(
        log_path=tmp_path / f"t.J{job_id}.log",
        name="quick.t",
        job_id=job_id,
        started=0.0,
        tag=f"quick.t J{job_id} {label}",
        devices=[SimpleNamespace(label=label)],
        **fields,
    )


def test_finished_lines_say_done_with_the_rate_or_fail_with_the_kind(tmp_path):
    out = io.StringIO()
    board = ProgressBoard(out)
    assert board.console is None  # not a terminal: plain lines
    board.finished(_instance(tmp_path, result=resultfactory.result("quick.t", "0.0", 123.4)))
    failed = resultfactory.result(
        "quick.t", "0.1", None, device="cpu:1", failure={"kind": "timeout", "message": "ran past"}
    )
    board.finished(_instance(tmp_path, "0.1", "cpu:1", result=failed))
    assert finished_line(_instance(tmp_path, result=failed)).startswith("FAIL   quick.t J0.0")
    assert out.getvalue().splitlines() == [
        "done   quick.t J0.0 cpu:0  123.40 examples/s",
        "FAIL   quick.t J0.1 cpu:1  timeout: ran past",
    ]


def test_live_table_has_one_row_per_instance(tmp_path):
    first, second = _instance(tmp_path), _instance(tmp_path, "0.1", "cpu:1")
    first.log_path.write_text(
        f"{PROGRESS_TAG} "
        + json.dumps(
            {"count": 640, "max_count": None, "slices": 3, "min_slices": 8, "rate": 1234.5}
        )
        + "\n"
    )
    board = ProgressBoard(io.StringIO())
    board.update([first, second])
    screen = Console(file=io.StringIO(), width=120)
    screen.print(board.table([first, second], now=7.0))
    lines = screen.file.getvalue().splitlines()
    assert lines[0].split() == ["test", "device", "rate", "slices", "count", "ETA", "time", "state"]
    assert lines[1].split() == [
        "quick.t",
        "cpu:0",
        "1,234.5",
        "ex/s",
        "3/8",
        "640",
        "2s",
        "7s",
        "measuring",
    ]
    assert lines[2].split() == ["quick.t", "cpu:1", "-", "7s", "starting"]
    with open(first.log_path, "a") as f:  # enough slices: the run is writing its result
        f.write(
            f"{PROGRESS_TAG} "
            + json.dumps(
                {"count": 1700, "max_count": None, "slices": 8, "min_slices": 8, "rate": 1000.0}
            )
            + "\n"
        )
    board.update([first, second])
    assert board.progress(first, now=9.0).state == "finishing"


def test_warnings_go_to_stderr_as_one_plain_line():
    code = (
        "import logging; from milarun.cli import options; options.setup_logging(); "
        "options.setup_logging(); "  # configured twice: still printed once
        "logging.getLogger('milarun.run.launch').warning('prepare command of %s failed', 'x')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == "milarun: warning: prepare command of x failed\n"


def test_hostile_progress_lines_never_reach_the_arithmetic():
    from milarun.run.progress import parse_progress

    for text in ("{", "[1, 2]", "null", "[" * 100_000):
        assert parse_progress(text) is None
    fields = parse_progress('{"rate": "fast", "count": -1, "slices": Infinity, "min_slices": 8}')
    assert fields["rate"] is None and fields["count"] is None and fields["slices"] is None
    assert fields["min_slices"] == 8


@pytest.mark.slow
def test_a_test_printing_hostile_progress_lines_is_supervised_to_the_end(tmp_path):
    from conftest import milarun

    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"h": {"experiment": "faulty:hostile_progress"}}))
    done = milarun("jobs", prof, "--devices", "cpu:1", "-o", tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "done   p.h J0.0 cpu:0" in done.stdout
