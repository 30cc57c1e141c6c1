"""Hostile input through the real CLI (issue 13, causes 5-7): names that would become
paths, files a reader must distrust, and the environment a rerun restores. Each one gets a
one-line error (or is skipped with its reason) and nothing already recorded is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cli_env, milarun, milarun_process, one_line_error
from fullfs import fill_up, full_tmpfs
from milarun import errors
from resultfactory import result, write


def no_json_below(folder, but=()) -> bool:
    return not [p for p in folder.rglob("*.json") if p not in but]


# -- cause 5: names become paths -------------------------------------------------------
@pytest.mark.parametrize("name", ["../x", "a/b", "x" * 240, ".hidden", "sp ace"])
def test_profile_job_names_must_be_safe_path_components(tmp_path, name):
    work = tmp_path / "work"
    work.mkdir()
    prof = work / "p.json"
    prof.write_text(json.dumps({name: {"experiment": "milabench.models.polynome:main"}}))
    done = milarun("jobs", prof, "--devices", "cpu:1", "-o", work / "out", cwd=work)
    line = one_line_error(done)
    assert "job name" in line and name[:30] in line and str(prof) in line
    assert list(tmp_path.rglob("*.log")) == [] and no_json_below(tmp_path, but=[prof])


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--experiment-name", "../escape"),
        ("--experiment-name", "a/b"),
        ("--experiment-name", "n" * 240),
        ("--job-id", "../0"),
        ("--job-id", "0/1"),
    ],
)
def test_run_refuses_unsafe_names(tmp_path, flag, value):
    out = tmp_path / "deep" / "out"
    done = milarun("run", "milabench.models.polynome:main", flag, value, "-o", out)
    line = one_line_error(done)
    assert flag in line and value[:30] in line
    assert no_json_below(tmp_path)


@pytest.mark.parametrize(
    "field, value",
    [("name", "../../evil"), ("name", "a/b"), ("job_id", "../0"), ("name", "e" * 240)],
)
def test_rerun_refuses_a_result_whose_name_is_a_path(tmp_path, field, value):
    folder = tmp_path / "a" / "b"
    data = result("suite.t", "0", 100.0)
    data[field] = value
    original = write(folder, data, "suite.t.J0.20260101-000000-000000.json")
    before = original.read_bytes()
    done = milarun("rerun", original)
    line = one_line_error(done)
    assert field in line and value[:30] in line
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [original]
    assert original.read_bytes() == before


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"world_size": 2}, "a run of 2 ranks under torchrun"),
        ({"ranks": [{"rank": 0}, {"rank": 1}, {"rank": 2}]}, "a run of 3 ranks"),
        ({"written_by": "milarun slurm check"}, "written by milarun slurm check"),
    ],
)
def test_rerun_refuses_a_record_it_cannot_reproduce(tmp_path, fields, fragment):
    # scaling.2 re-measured as one process, or a FAIL record of `slurm check` re-run with
    # no arguments, would be saved under the original's name as something it is not
    data = {**result("suite.scaling.2", "0", 100.0), **fields}
    original = write(tmp_path / "a", data, "suite.scaling.2.J0.20260101-000000-000000.json")
    line = one_line_error(milarun("rerun", original))
    assert fragment in line and str(original) in line
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [original]


# -- cause 6: readers distrust files ----------------------------------------------------
@pytest.fixture
def hostile_dir(tmp_path):
    res = tmp_path / "results"
    extreme = {"train": {"cv": 1e308, "drift": 1e308, "slices": 1e308, "flags": []}}
    write(res, result("suite.good", "0", 100.0, diagnostics=extreme))
    write(res, result("suite.good", "1", 100.0, diagnostics=extreme))
    # rates so large their mean overflows: not a measurement, the run counts as failed
    write(res, result("suite.overflow", "0", None, rates=[1e308] * 24))
    write(res, result("suite.overflow", "1", None, rates=[1e200] * 24))  # its square would
    # monitor samples of the wrong shape are ignored where they are read, the run counts
    write(
        res,
        result(
            "suite.good",
            "2",
            100.0,
            cpu_monitor={"samples": [{"rss_mb": "x"}, 3]},
            gpu_monitor={"samples": [{"gpus": {"0": {"memory": ["a"]}}}, []]},
        ),
    )
    bad = {
        "rates": result("suite.r", "0", 100.0),
        "metrics": result("suite.m", "0", 100.0, metrics=[1, 2]),
        "failure": result("suite.f", "0", 100.0),
        "samples": result("suite.s", "0", 100.0, cpu_monitor={"samples": "x"}),
        "slice": result("suite.sl", "0", 100.0),
    }
    bad["rates"]["timings"]["train"]["rates"] = "100,100"
    bad["slice"]["timings"]["train"]["slice"] = "0.5"
    bad["failure"].update(success=False, failure="oops")
    for key, data in bad.items():
        write(res, data, f"{key}.J0.20260101-000000-000000.json")
    (res / "deep.J0.20260101-000000-000000.json").write_text(  # html dumps 'system'
        '{"name": "x", "success": true, "system": ' + '{"a": ' * 900 + "1" + "}" * 901
    )
    (res / "deeper.J0.20260101-000000-000000.json").write_text(  # past the parser's limit
        '{"name": "x", "success": true, "metrics": ' + "[" * 5000 + "]" * 5000 + "}"
    )
    (res / "latin1.J0.20260101-000000-000000.json").write_bytes(
        b'{"name": "caf\xe9", "success": true}'
    )
    os.mkfifo(res / "fifo.J0.20260101-000000-000000.json")
    with open(res / "huge.J0.20260101-000000-000000.json", "wb") as f:
        f.truncate(65 * 2**20)  # sparse: no disk used
    return res


def test_summary_skips_every_unusable_file_with_its_reason(hostile_dir, tmp_path):
    done = milarun("summary", hostile_dir, "-o", tmp_path / "s.json", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert list(summary) == ["suite.good", "suite.overflow"]
    assert summary["suite.good"]["n"] == 3 and summary["suite.good"]["failures"] == 0
    overflow = summary["suite.overflow"]
    assert overflow["failures"] == 2 and overflow["train"]["mean"] is None
    for fragment in (
        "rates.J0",
        "'timings.train.rates'",
        "'metrics'",
        "'failure'",
        "'cpu_monitor.samples'",
        "'timings.train.slice'",
        "deep.J0",
        "'system' is nested deeper",
        "deeper.J0",
        "JSON nested deeper",
        "latin1.J0",
        "not UTF-8",
        "fifo.J0",
        "not a regular file",
        "huge.J0",
        "larger than 64 MiB",
    ):
        assert fragment in done.stderr, (fragment, done.stderr)


def test_report_reads_a_hostile_folder_without_hanging(hostile_dir):
    weights = hostile_dir.parent / "w.json"
    weights.write_text(json.dumps({"suite.good": 1e6, "suite.overflow": 1}))
    done = milarun("report", hostile_dir, "--weights", weights, "--format", "json", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    scores = json.loads(done.stdout)["scores"]
    assert scores["score"] == pytest.approx(100.0)  # suite.overflow failed: unscored
    assert scores["unscored"] == ["suite.overflow"]


def test_html_of_a_folder_with_a_file_name_that_is_not_utf8(hostile_dir, tmp_path):
    (hostile_dir / os.fsdecode(b"\xffbad.J0.20260101-000000-000000.json")).write_text("{}")
    page = tmp_path / "page.html"
    done = milarun("report", hostile_dir, "--html", page, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "\ufffdbad.J0" in page.read_text(encoding="utf-8")


@pytest.mark.parametrize("target", ["fifo", "/dev/stdout"])
def test_html_into_a_pipe_is_refused_not_hung(hostile_dir, tmp_path, target):
    path = tmp_path / "page.fifo" if target == "fifo" else Path(target)
    if target == "fifo":
        os.mkfifo(path)
    done = subprocess.run(  # stdout a pipe, as in `report --html /dev/stdout | cat`
        [sys.executable, "-m", "milarun", "report", str(hostile_dir), "--html", str(path)],
        cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert "is not a regular file" in one_line_error(done)


def _weights(tmp_path, content: bytes):
    path = tmp_path / "w.json"
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b'{"suite.good": 1e308}', "1e+308"),
        (b'{"suite.good": 1, "suite.other": 1e300}', "1e+300"),
        (b'{"suite.good": NaN}', "nan"),
        (b'{"suite.good": -1}', "-1"),
        (b'{"suite.g\xe9": 1}', "not UTF-8"),
        (b"[" * 5000 + b"]" * 5000, "nested deeper"),
    ],
)
def test_bad_weights_are_refused(hostile_dir, tmp_path, content, fragment):
    weights = _weights(tmp_path, content)
    done = milarun("report", hostile_dir, "--weights", weights, timeout=300)
    lines = [x for x in done.stderr.splitlines() if x.startswith("milarun: error")]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 and str(weights) in lines[0] and fragment in lines[0], done.stderr


def test_a_fifo_as_weights_or_baseline_does_not_hang(hostile_dir, tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for flag in ("--weights", "--compare"):
        done = milarun("report", hostile_dir, flag, fifo, timeout=300)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "not a regular file" in done.stderr and str(fifo) in done.stderr


def _baseline(tmp_path, entry: dict | None = None, raw: bytes | None = None):
    path = tmp_path / "base.json"
    if raw is None:
        good = {
            "n": 2,
            "failures": 0,
            "train": {"n": 2, "min": 90.0, "max": 110.0, "mean": 100.0, "std": 10.0},
            "rates": [90.0, 110.0],
        }
        raw = json.dumps({"suite.good": {**good, **(entry or {})}}).encode()
    path.write_bytes(raw)
    return path


@pytest.mark.parametrize(
    "entry, raw, fragment",
    [
        ({"rates": ["90", "110"]}, None, "'rates'"),
        ({"train": {"n": 2, "mean": "100", "std": 1.0}}, None, "'train.mean'"),
        ({"train": {"n": 2, "mean": 1e400, "std": 1.0}}, None, "'train.mean'"),
        ({"train": {"n": 2, "mean": 1e300, "std": 1e300}}, None, "'train.mean'"),
        ({"rates": [1e200, 1e200]}, None, "'rates'"),
        ({"quality": {"cv": "high"}}, None, "'quality.cv'"),
        ({"quality": {"startup": 3}}, None, "'quality.startup'"),
        ({"n": "2"}, None, "'n'"),
        ({"failures": 5}, None, "'failures'"),
        (
            None,
            b'{"suite.good": {"n": 1, "failures": 0, "train": {"n": 1, "mean": 1, "std": 0},'
            b' "x": "\xff"}}',
            "not UTF-8",
        ),
    ],
)
def test_bad_baselines_are_refused(hostile_dir, tmp_path, entry, raw, fragment):
    base = _baseline(tmp_path, entry, raw)
    done = milarun("report", hostile_dir, "--compare", base, timeout=300)
    lines = [x for x in done.stderr.splitlines() if x.startswith("milarun: error")]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 and str(base) in lines[0] and fragment in lines[0], done.stderr


def test_a_sound_baseline_still_compares(hostile_dir, tmp_path):
    done = milarun("report", hostile_dir, "--compare", _baseline(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr


# -- cause 7: rerun restores the environment, not the supervisor's variables -------------
def _calibration_result(folder, environ):
    data = result("quick.calibration", "0.1", 100.0, environ=environ, dataroot=str(folder / "data"))
    data["call"] = {
        "function": "milabench.models.calibration:main",
        "argv": ["--step-time", "0.0025"],
        "arguments": {},
    }
    return write(folder, data, "quick.calibration.J0.1.20260101-000000-000000.json")


@pytest.mark.slow
def test_rerun_restores_the_environment_but_not_the_supervisors(tmp_path):
    original = _calibration_result(
        tmp_path / "orig",
        {
            "OMP_NUM_THREADS": "1",
            "MILARUN_DEVICE": "cpu:1/2",
            "CUDA_VISIBLE_DEVICES": "",
            "MILARUN_DEADLINE": "1.0",
            "MILARUN_SUPERVISOR_PID": "999999999",
            "MILARUN_RESULT_STAMP": "20260101-000000-000000",
            "MILARUN_CGROUP": "cpuset,memory:student1",
            "SLURM_JOB_ID": "77",
        },
    )
    out = tmp_path / "new"
    done = milarun("rerun", original, "-o", out, "--", "--min-slices", "8", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = out.glob("*.json")
    new = json.loads(path.read_text())
    assert new["success"] and new["rerun_of"] == str(original.resolve())
    assert len(new["timings"]["train"]["rates"]) >= 8  # not stopped by the old deadline
    env = new["environ"]
    assert env["OMP_NUM_THREADS"] == "1" and env["MILARUN_DEVICE"] == "cpu:1/2"
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    for dropped in (
        "MILARUN_DEADLINE",
        "MILARUN_SUPERVISOR_PID",
        "MILARUN_RESULT_STAMP",
        "MILARUN_CGROUP",
        "SLURM_JOB_ID",
    ):
        assert dropped not in env
    assert new["isolation"]["requested"] is None
    assert new["slurm"] is None  # the Slurm job it first ran in is over


@pytest.mark.parametrize(
    "environ, fragment",
    [
        ({"OMP_NUM_THREADS": 4}, "OMP_NUM_THREADS"),
        ({"CUDA_VISIBLE_DEVICES": ["0"]}, "CUDA_VISIBLE_DEVICES"),
        ({"A=B": "1"}, "A=B"),
        (["OMP_NUM_THREADS=1"], "environ"),
        ({}, "call.argv"),
        ({}, "dataroot"),
        ({}, "'timings'"),
    ],
)
def test_rerun_refuses_a_hand_edited_environment(tmp_path, environ, fragment):
    original = _calibration_result(tmp_path, environ)
    data = json.loads(original.read_text())
    if fragment == "call.argv":
        data["call"]["argv"] = ["--step-time", 0.0025]
    elif fragment == "dataroot":
        data["dataroot"] = 5
    elif fragment == "'timings'":
        data["timings"] = [1, 2]
    original.write_text(json.dumps(data))
    done = milarun("rerun", original, "-o", tmp_path / "new")
    line = one_line_error(done)
    assert fragment in line and str(original) in line
    assert not (tmp_path / "new").exists()


def test_the_longest_safe_names_still_fit_a_file_name():
    from milarun import results

    name, job_id = "n" * results.MAX_NAME, "9" * results.MAX_NAME
    assert results.safe_name(name, "name") == name
    longest = results.result_filename(name, job_id, False, results.utc_stamp())
    assert len(f".{longest}.4194304.tmp".encode()) <= 255  # write_atomic's temporary file
    with pytest.raises(errors.InputError, match="at most 100"):
        results.safe_name(name + "n", "name")
    for bad in ("", ".", "..", "a/b", "a\0b", "é", 5, None):
        with pytest.raises(errors.InputError, match="not a safe name"):
            results.safe_name(bad, "name")


@pytest.mark.parametrize("depth", [100, 200_000])
def test_a_deeply_nested_profile_gets_one_line(tmp_path, depth):
    prof = tmp_path / "deep.json"
    prof.write_text(
        '{"t": {"experiment": "milabench.models.polynome:main", "arguments": '
        + '{"a": ' * depth
        + "1"
        + "}" * depth
        + "}}"
    )
    done = milarun("jobs", prof, "-o", tmp_path / "out")
    line = one_line_error(done)
    assert str(prof) in line and "nested deeper" in line
    assert not (tmp_path / "out").exists()


def test_a_huge_profile_is_not_read(tmp_path):
    prof = tmp_path / "huge.json"
    with open(prof, "wb") as f:
        f.truncate(65 * 2**20)
    done = milarun("jobs", prof, "-o", tmp_path / "out")
    line = one_line_error(done)
    assert str(prof) in line and "larger than 64 MiB" in line


@pytest.fixture
def full_disk(tmp_path):
    """A real 64 KiB tmpfs filled to the last byte (its tests are marked root), unmounted
    afterwards."""
    with full_tmpfs(tmp_path / "disk") as disk:
        yield disk


@pytest.mark.root("mounts a tmpfs")
@pytest.mark.slow
def test_a_full_disk_loses_no_measurement_and_leaves_no_temp_file(tmp_path):
    """The disk fills while the test runs (the start-up write check passed): the finished
    measurement is printed whole, the error is one line, no temporary file survives."""
    with full_tmpfs(tmp_path / "disk", size="2m", fill=False) as full_disk:
        proc = milarun_process(
            "run",
            "milabench.models.calibration:main",
            "-o",
            full_disk / "out",
            "--",
            "--min-slices",
            "5",
            # as under `jobs` (this process its supervisor): progress as tagged stdout lines
            env={"MILARUN_SUPERVISOR_PID": str(os.getpid())},
        )
        for line in proc.stdout:  # the run is measuring: now the disk fills up
            if line.startswith("MILARUN_PROGRESS"):
                fill_up(full_disk)
                break
        stdout, stderr = proc.communicate(timeout=120)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        assert not [p for p in full_disk.rglob("*") if p.name.endswith(".tmp")]
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "cannot write" in line and "MILARUN_UNWRITTEN_RESULT" in line
    printed = [
        line for line in done.stdout.splitlines() if line.startswith("MILARUN_UNWRITTEN_RESULT")
    ]
    result = json.loads(printed[0].split(" ", 1)[1])
    assert result["success"] is True and len(result["timings"]["train"]["rates"]) >= 5


@pytest.mark.root("mounts a tmpfs")
def test_jobs_on_a_full_disk_stops_before_anything_runs(full_disk):
    """The run manifest is the start-up write check: a real file, written before the first
    job; on a full disk `jobs` ends there, in one line, and starts no instance."""
    done = milarun(
        "jobs",
        "quick",
        "--name",
        "polynome",
        "--devices",
        "cpu:1",
        "-o",
        full_disk / "out",
        "-d",
        full_disk / "data",
    )
    line = one_line_error(done)
    assert "not writable" in line and "room for the results" in line
    assert not (full_disk / "out" / "logs").exists()
    assert not [p for p in full_disk.rglob("*") if p.name.endswith(".tmp")]


@pytest.mark.root("mounts a tmpfs")
def test_summary_and_html_report_on_a_full_disk_are_one_line_errors(tmp_path):
    folder = tmp_path / "res"
    write(folder, result("t.a", "0", 100.0))
    with full_tmpfs(tmp_path / "disk") as disk:
        for words in (
            ["summary", folder, "-o", disk / "s.json"],
            ["report", folder, "--html", disk / "r.html"],
        ):
            line = one_line_error(milarun(*words))
            assert "cannot write" in line and str(disk) in line
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no temp file


@pytest.mark.parametrize(
    "command",
    [
        ["dataset", "mnist", "--synthetic"],
        ["jobs", "quick", "--name", "polynome", "--devices", "cpu:1"],
    ],
)
def test_an_uncreatable_data_root_is_a_one_line_error(tmp_path, command):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where a folder would go
    line = one_line_error(
        milarun(*command, "-o", tmp_path / "out", "-d", blocker / "data")
        if command[0] == "jobs"
        else milarun(*command, "-d", blocker / "data")
    )
    assert "data folder" in line and str(blocker / "data") in line and "pass -d" in line


def test_more_cpu_slices_than_cpus_are_said_under_oversubscribe(tmp_path):
    slices = len(os.sched_getaffinity(0)) + 1
    (tmp_path / "file").write_text("")  # an output "folder" that is a file: stops right after
    done = milarun(
        "jobs",
        "quick",
        "--name",
        "calibration",
        "--devices",
        f"cpu:{slices}",
        "--oversubscribe",
        "-o",
        tmp_path / "file",
        "-d",
        tmp_path / "data",
    )
    assert f"--devices cpu:{slices} asks for more slices than" in done.stderr
    assert done.returncode != 0 and "not writable" in done.stderr
