"""The live progress board reads tagged lines from instance logs."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from milarun.progress import PROGRESS_TAG, ProgressBoard


def test_board_reads_progress_and_streams_output(tmp_path):
    log = tmp_path / "t.log"
    inst = SimpleNamespace(log_path=log, name="quick.t", job_id="0.1", started=0.0,
                           tag="quick.t J0.1 cpu:1")
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
    assert "100.0 ex/s" in line and "500/2000" in line and "ETA 15s" in line
    with open(log, "a") as f:
        f.write("ial line\n")
    board.update([inst])
    assert "[quick.t J0.1] partial line" in out.getvalue()  # split writes are joined


def test_eta_follows_the_slices_when_no_count_is_asked(tmp_path):
    log = tmp_path / "t.log"
    inst = SimpleNamespace(log_path=log, name="quick.t", job_id="0.0", started=0.0,
                           tag="quick.t J0.0 cpu:0")
    board = ProgressBoard(io.StringIO(), interval=0.0)
    progress = {"timer": "train", "count": 500, "max_count": None, "slices": 4,
                "min_slices": 12, "rate": 100.0}
    log.write_text(f"{PROGRESS_TAG} {json.dumps(progress)}\n")
    board.update([inst])
    line = board.line(inst, now=10.0)
    assert "4/12 slices" in line and " 500 " in line and "ETA 4s" in line  # 8 x 0.5 s
    # with a count too, the later of the two decides
    progress.update(max_count=2000)
    log.write_text(f"{PROGRESS_TAG} {json.dumps(progress)}\n")
    board2 = ProgressBoard(io.StringIO(), interval=0.0)
    board2.update([inst])
    assert "500/2000" in board2.line(inst, now=10.0) and "ETA 15s" in board2.line(inst, now=10.0)
