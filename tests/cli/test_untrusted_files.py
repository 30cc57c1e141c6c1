"""Files a reader must distrust, part 2 (issue 24, causes D and L): a folder where a JSON
file is read, a hand-damaged run manifest, names of any length in result and summary files,
numbers past any float. Each is one line (an error, or a warning and the file passed by),
never a traceback, and what was recorded is untouched."""

from __future__ import annotations

import json

import pytest

from conftest import milarun, one_line_error
from milarun.results import manifest
from resultfactory import result, write

STAMP = "20260101-000000-000000"


@pytest.fixture
def folder(tmp_path):
    """A results folder with two good results."""
    res = tmp_path / "res"
    write(res, result("suite.good", "0", 100.0))
    write(res, result("suite.good", "1", 100.0))
    return res


def no_traceback(done) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stderr


# -- cause D: a folder where a JSON file is read ------------------------------------------
@pytest.mark.parametrize("command", [["rerun", "{dir}"], ["report", "{res}", "--weights", "{dir}"]])
def test_a_folder_given_as_a_json_file_is_one_line(folder, tmp_path, command):
    given = tmp_path / "a.json"
    given.mkdir()
    done = milarun(*(w.format(dir=given, res=folder) for w in command))
    line = one_line_error(done)
    assert str(given) in line and "a folder, not a JSON file" in line


def _manifest(**fields) -> dict:
    data = {
        "kind": manifest.KIND,
        "profile": "suite",
        "status": "interrupted",
        "reason": "SIGTERM",
        "started_at": 1.7e9,
        "finished_at": None,
        "pid": 1,
        "host": "h",
        "devices": ["cpu:0"],
        "repeat": 1,
        "planned": ["suite.good", "suite.other"],
        "ended": [{"test": "suite.good", "job_id": "0", "success": True, "result": None}],
        **fields,
    }
    return data


def test_a_sound_manifest_says_the_run_was_cut_short(folder):
    (folder / f"{manifest.PREFIX}{STAMP}{manifest.SUFFIX}").write_text(json.dumps(_manifest()))
    done = milarun("report", folder)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # the warning wraps at the report's width
    assert "was cut short (SIGTERM): no result for suite.other" in text, done.stdout


@pytest.mark.parametrize(
    "fields, raw, fragment",
    [
        ({"planned": 5}, None, "'planned'"),
        ({"ended": 5}, None, "'ended'"),
        ({"ended": [5]}, None, "'ended'"),
        ({"started_at": 1e300}, None, "'started_at' 1e+300"),
        ({"started_at": 10**400}, None, "'started_at' inf"),  # past the float range
        (None, '{"started_at": NaN}', "'started_at' nan"),
        ({"status": ["x"]}, None, "'status'"),
        ({"planned": ["x" * 300]}, None, "300 characters"),
        (None, None, "a folder, not a JSON file"),
    ],
)
def test_a_damaged_manifest_is_passed_by_with_a_warning(folder, fields, raw, fragment):
    path = folder / f"{manifest.PREFIX}{STAMP}{manifest.SUFFIX}"
    if fields is None and raw is None:
        path.mkdir()  # a folder named like a manifest
    elif raw is not None:
        text = json.dumps(_manifest())
        path.write_text(text.replace('"started_at": 1700000000.0', raw[1:-1]))
    else:
        path.write_text(json.dumps(_manifest(**fields)))
    done = milarun("report", folder)
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "run manifest ignored" in line]
    assert len(warnings) == 1 and str(path) in warnings[0] and fragment in warnings[0], done.stderr
    assert "suite.good" in done.stdout  # the results are reported all the same


# -- cause L: names read from files are bounded and checked ----------------------------------
def test_names_from_files_are_bounded_and_checked(folder, tmp_path):
    """A 300-character name (no dot: it would name a weights file), a 10 MB one, names of
    several lines: each file is skipped with one line naming it; the report stays its usual
    size."""
    bad = {
        "long": result("x" * 300, "0", 100.0),
        "huge": result("y" * 10_000_000, "0", 100.0),
        "lines": result("suite.good\nFAIL suite.bad", "0", 100.0),
        "jobid": result("suite.good", "0\r1", 100.0),
    }
    for key, data in bad.items():
        write(folder, data, f"{key}.J0.{STAMP}.json")
    page = tmp_path / "r.html"
    done = milarun("report", folder, "--html", page)
    assert done.returncode == 0, done.stderr[:2000]
    no_traceback(done)
    assert len(done.stdout) + len(done.stderr) < 20_000
    assert page.stat().st_size < 2 * 2**20
    for key, fragment in (
        ("long", "(300 characters) is too long: at most 100"),
        ("huge", "(10000000 characters) is too long"),
        ("lines", "'name' 'suite.good\\nFAIL suite.bad' holds a line break"),
        ("jobid", "'job_id' '0\\r1' holds a line break"),
    ):
        lines = [line for line in done.stderr.splitlines() if f"{key}.J0.{STAMP}.json" in line]
        assert len(lines) == 1 and fragment in lines[0], done.stderr[:2000]


def test_a_folder_of_only_a_long_name_is_one_line(tmp_path):
    """The operator's crash: alone in its folder, a 300-character name without a dot was
    taken for a suite whose weights file name is too long for the file system."""
    write(tmp_path / "res", result("x" * 300, "0", 100.0), f"a.J0.{STAMP}.json")
    line = one_line_error(milarun("report", tmp_path / "res"))
    assert "no milarun results" in line and "too long" in line and len(line) < 600


def test_a_rerun_of_a_huge_name_is_one_short_line(tmp_path):
    path = write(tmp_path, result("n" * 10_000_000, "0", 100.0), f"a.J0.{STAMP}.json")
    line = one_line_error(milarun("rerun", path))
    assert str(path) in line and "too long" in line and len(line) < 600


def test_a_summary_with_a_huge_test_name_is_one_short_line(folder, tmp_path):
    summary = tmp_path / "s.json"
    assert milarun("summary", folder, "-o", summary).returncode == 0
    data = json.loads(summary.read_text())
    data["t" * 1_000_000] = data["suite.good"]
    summary.write_text(json.dumps(data))
    for words in (["report", summary], ["report", folder, "--compare", summary]):
        line = one_line_error(milarun(*words))
        assert str(summary) in line and "(1000000 characters) is not a test name" in line
        assert len(line) < 600


def test_integers_past_any_float_are_skipped_with_their_field(folder):
    data = result("suite.good", "2", 100.0)
    text = json.dumps(data).replace('"slice": 0.5', '"slice": 1' + "0" * 400, 1)
    (folder / f"big.J0.{STAMP}.json").write_text(text)
    text = json.dumps(data).replace('"slice": 0.5', '"slice": 1' + "0" * 5000, 1)
    (folder / f"bigger.J0.{STAMP}.json").write_text(text)
    done = milarun("report", folder)
    no_traceback(done)
    assert done.returncode == 0
    for name in ("big", "bigger"):
        (line,) = [x for x in done.stderr.splitlines() if f"{name}.J0" in x]
        assert "'timings.train.slice' is not a number" in line


@pytest.mark.parametrize(
    "key, value",
    [
        ("device", "d" * 10_000_000),  # the rows of every table: 270 MB of text
        ("node", "n" * 10_000_000),
        ("hostname", "h" * 10_000_000),
        ("devices", ["d" * 300]),
        ("slurm", {"node": "n" * 300}),
        ("device", "cpu:0\nFAIL suite.good"),  # a line of its own in a one-line message
    ],
)
def test_labels_from_files_are_bounded_and_printable(folder, tmp_path, key, value):
    data = result("suite.good", "2", 100.0)
    data[key] = value
    write(folder, data, f"label.J0.{STAMP}.json")
    page = tmp_path / "r.html"
    done = milarun("report", folder, "--html", page)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[:2000]
    assert len(done.stdout) + len(done.stderr) < 20_000 and page.stat().st_size < 2 * 2**20
    (line,) = [x for x in done.stderr.splitlines() if f"label.J0.{STAMP}.json" in x]
    assert "is too long: at most 255 characters" in line or "holds a line break" in line


def test_a_huge_error_or_message_is_cut_not_skipped(folder, tmp_path):
    """The run still counts (a failed run is a run); what a report quotes of it is bounded."""
    data = result("suite.good", "2", None, failure={"kind": "crash", "message": "m" * 10**7})
    data["error"] = "e" * 10**7
    write(folder, data, f"failed.J0.{STAMP}.json")
    page = tmp_path / "r.html"
    done = milarun("report", folder, "--html", page, "--format", "json")
    assert done.returncode == 0, done.stderr[:2000]
    assert json.loads(done.stdout)["scores"]["failure_kinds"] == {"crash": 1}
    assert len(done.stdout) + len(done.stderr) < 200_000 and page.stat().st_size < 2 * 2**20
