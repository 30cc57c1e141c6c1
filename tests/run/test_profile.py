"""Job profiles: loading, defaults, argv, errors (milarun/profile.py) and the CLI's
one-line error for a broken profile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from milarun.run import profile
from milarun.run.profile import (
    DEFAULT_MAX_DURATION,
    Job,
    ProfileError,
    arguments_to_argv,
    load_profile,
)

EXP = "milabench.models.polynome:main"  # an importable experiment module


def write(tmp_path: Path, data, name: str = "suite.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2), encoding="utf-8")
    return path


def error_of(path_or_spec) -> str:
    with pytest.raises(ProfileError) as info:
        load_profile(str(path_or_spec))
    return str(info.value)


# -- shipped profiles -----------------------------------------------------------------------
def test_quick_by_name_is_the_shipped_file():
    prof = load_profile("quick")
    assert prof.path.resolve() == (ROOT / "milarun" / "profiles" / "quick.json").resolve()
    assert prof.name == "quick"
    assert {"calibration", "polynome", "sine_wave"} <= set(prof.jobs)
    for job in prof.jobs.values():
        assert isinstance(job, Job)
        assert job.suite == "quick"
        assert job.fullname == f"quick.{job.name}"
        assert job.experiment.startswith("milabench.models.")
        assert "quick" in job.tags
        assert 0 < job.max_duration <= DEFAULT_MAX_DURATION


def test_quick_by_name_equals_quick_by_path():
    by_name = load_profile("quick")
    by_path = load_profile(str(ROOT / "profiles" / "quick.json"))
    assert by_path.name == by_name.name
    assert by_path.path.resolve() == by_name.path.resolve()
    assert list(by_path.jobs) == list(by_name.jobs)
    assert by_path.jobs == by_name.jobs


def test_quick_with_json_suffix():
    assert load_profile("quick.json").jobs == load_profile("quick").jobs


def test_defaults_merge_into_each_job_and_become_its_argv(tmp_path):
    """A profile's "*" defaults, the job's own keys over them, and the argv they make
    (true: a bare flag, false: omitted, the job's values after the defaults)."""
    path = write(
        tmp_path,
        {
            "*": {
                "experiment": EXP,
                "max_duration": 120,
                "tags": ["toy"],
                "arguments": {"--min-slices": 12, "--cpu": True, "--verbose": False},
                "partition_scheme": {"type": "per-gpu"},
            },
            "poly": {"arguments": {"--batch-size": 256, "--cpu": False}, "max_duration": 300},
        },
        "mine.json",
    )
    job = load_profile(str(path)).jobs["poly"]
    assert (job.experiment, job.partition, job.max_duration, job.tags) == (
        EXP,
        "per-gpu",
        300.0,
        ["toy"],
    )
    assert job.fullname == "mine.poly"
    assert job.argv() == ["--min-slices", "12", "--batch-size", "256"]


def test_unknown_profile_name_lists_shipped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    msg = error_of("no-such-profile")
    assert "no-such-profile" in msg
    assert "not found" in msg
    shipped = sorted(p.stem for p in profile.PROFILE_DIR.glob("*.json"))
    assert "quick" in shipped
    for name in shipped:
        assert name in msg


def test_missing_profile_path(tmp_path):
    msg = error_of(tmp_path / "absent.json")
    assert "absent.json" in msg and "quick" in msg


# -- defaults and arguments ----------------------------------------------------------------
def test_star_defaults_merge_into_each_job(tmp_path):
    path = write(
        tmp_path,
        {
            "*": {
                "experiment": EXP,
                "arguments": {"--batch-size": 32, "--lr": 0.1, "--cuda": True},
                "partition_scheme": {"type": "per-gpu", "cgroup": "cpuset,memory:student{x}"},
                "max_duration": 120,
                "tags": ["base"],
                "prepare": "echo hi",
                "exec_prefix": "nocache -n 2",
            },
            "one": {"arguments": {"--lr": 0.5, "--extra": "x"}},
            "two": {
                "arguments": {"--cuda": False},
                "partition_scheme": {"type": "normal"},
                "max_duration": 30.5,
                "tags": ["own"],
                "prepare": ["a", "b"],
                "exec_prefix": [],
            },
        },
    )
    prof = load_profile(str(path))
    assert prof.name == "suite"
    assert list(prof.jobs) == ["one", "two"]  # "*" is not a job
    one, two = prof.jobs["one"], prof.jobs["two"]

    assert one.experiment == EXP and two.experiment == EXP
    # arguments merge, the job winning
    assert one.arguments == {"--batch-size": 32, "--lr": 0.5, "--cuda": True, "--extra": "x"}
    assert one.argv() == ["--batch-size", "32", "--lr", "0.5", "--cuda", "--extra", "x"]
    assert two.arguments == {"--batch-size": 32, "--lr": 0.1, "--cuda": False}
    assert two.argv() == ["--batch-size", "32", "--lr", "0.1"]
    # partition_scheme merges too: the job's type, the default cgroup
    assert one.partition == "per-gpu"
    assert two.partition == "normal"
    assert one.cgroup == two.cgroup == "cpuset,memory:student{x}"
    # scalar and list keys: the job replaces the default
    assert one.max_duration == 120.0 and two.max_duration == 30.5
    assert one.tags == ["base"] and two.tags == ["own"]
    assert one.prepare == ["echo hi"] and two.prepare == ["a", "b"]
    assert one.exec_prefix == ["nocache", "-n", "2"] and two.exec_prefix == []
    assert one.suite == "suite" and one.fullname == "suite.one"


def test_defaults_are_not_shared_between_jobs(tmp_path):
    path = write(
        tmp_path,
        {"*": {"experiment": EXP, "arguments": {"--a": 1}, "tags": ["t"]}, "one": {}, "two": {}},
    )
    prof = load_profile(str(path))
    prof.jobs["one"].arguments["--a"] = 99
    prof.jobs["one"].tags.append("changed")
    assert prof.jobs["two"].arguments == {"--a": 1}
    assert prof.jobs["two"].tags == ["t"]


def test_job_without_defaults_gets_builtin_defaults(tmp_path):
    prof = load_profile(str(write(tmp_path, {"only": {"experiment": EXP}})))
    job = prof.jobs["only"]
    assert job.arguments == {} and job.argv() == []
    assert job.partition == "per-gpu" and job.cgroup is None
    assert job.max_duration == DEFAULT_MAX_DURATION == 600.0
    assert job.tags == [] and job.prepare == [] and job.exec_prefix == []


def test_arguments_to_argv():
    argv = arguments_to_argv(
        {
            "--flag": True,
            "--off": False,
            "--none": None,
            "--int": 3,
            "--float": 0.005,
            "--str": "abc",
            "plain": 7,
            "bare": True,
            "-s": 1,
            "--list": [1, "b"],
        }
    )
    assert argv == [
        "--flag",
        "--int",
        "3",
        "--float",
        "0.005",
        "--str",
        "abc",
        "--plain",
        "7",
        "--bare",
        "-s",
        "1",
        "--list",
        "1",
        "b",
    ]
    assert all(isinstance(a, str) for a in argv)
    assert arguments_to_argv({}) == []


# -- errors --------------------------------------------------------------------------------
def test_invalid_json_names_file_line_column(tmp_path):
    text = '{\n  "a": {\n    "experiment": "x:y",\n  }\n}\n'  # trailing comma on line 3
    path = write(tmp_path, text, "broken.json")
    msg = error_of(path)
    assert str(path) in msg
    assert "line 4" in msg
    assert "column 3" in msg
    assert "invalid JSON" in msg


def test_top_level_not_an_object(tmp_path):
    msg = error_of(write(tmp_path, "[1, 2]", "list.json"))
    assert "list.json" in msg and "object" in msg


def test_empty_profile(tmp_path):
    msg = error_of(write(tmp_path, {"*": {"experiment": EXP}}, "empty.json"))
    assert "empty.json" in msg and "no job" in msg


def test_unknown_key_names_file_job_and_key(tmp_path):
    path = write(
        tmp_path,
        {"good": {"experiment": EXP}, "resnet": {"experiment": EXP, "argumnets": {"--x": 1}}},
        "typo.json",
    )
    msg = error_of(path)
    assert str(path) in msg
    assert "'resnet'" in msg
    assert "'argumnets'" in msg
    assert "arguments" in msg.split("'argumnets'", 1)[1]  # lists the valid keys


def test_unknown_key_in_defaults(tmp_path):
    msg = error_of(write(tmp_path, {"*": {"timeout": 3}, "a": {"experiment": EXP}}))
    assert "'*'" in msg and "'timeout'" in msg


def test_job_not_an_object(tmp_path):
    msg = error_of(write(tmp_path, {"a": ["experiment"]}))
    assert "'a'" in msg and "object" in msg


@pytest.mark.parametrize(
    "experiment",
    [
        "no_such_module_zzz:main",
        "milabench.models.no_such_model_zzz:main",
        "no_such_pkg_zzz.sub:main",
    ],
)
def test_experiment_module_missing(tmp_path, experiment):
    path = write(tmp_path, {"ok": {"experiment": EXP}, "ghost": {"experiment": experiment}})
    msg = error_of(path)
    assert str(path) in msg
    assert "'ghost'" in msg
    assert "key 'experiment'" in msg
    assert experiment.split(":")[0] in msg


@pytest.mark.parametrize("experiment", [None, "milabench.models.polynome", 3])
def test_experiment_malformed(tmp_path, experiment):
    job = {} if experiment is None else {"experiment": experiment}
    msg = error_of(write(tmp_path, {"j": job}))
    assert "'j'" in msg and "key 'experiment'" in msg and "module:function" in msg


@pytest.mark.parametrize(
    "scheme", [{"type": "per-cpu"}, {"type": 3}, "per-gpu", {"type": "normal", "cgroups": "x"}]
)
def test_bad_partition_scheme(tmp_path, scheme):
    msg = error_of(write(tmp_path, {"j": {"experiment": EXP, "partition_scheme": scheme}}))
    assert "'j'" in msg
    assert "key 'partition_scheme'" in msg


def test_partition_types_accepted(tmp_path):
    data = {
        t: {"experiment": EXP, "partition_scheme": {"type": t}}
        for t in ("per-gpu", "gpu-progression", "normal")
    }
    prof = load_profile(str(write(tmp_path, data)))
    assert {name: j.partition for name, j in prof.jobs.items()} == {
        "per-gpu": "per-gpu",
        "gpu-progression": "gpu-progression",
        "normal": "normal",
    }


@pytest.mark.parametrize("value", [-5, 0, "600", True, None])
def test_bad_max_duration(tmp_path, value):
    msg = error_of(write(tmp_path, {"slow": {"experiment": EXP, "max_duration": value}}))
    assert "'slow'" in msg
    assert "key 'max_duration'" in msg
    assert repr(value) in msg


@pytest.mark.parametrize(
    "key, value",
    [
        ("arguments", ["--x", "1"]),
        ("prepare", [1, 2]),
        ("exec_prefix", {"a": 1}),
        ("tags", "quick"),
        ("tags", [1]),
    ],
)
def test_bad_value_types(tmp_path, key, value):
    msg = error_of(write(tmp_path, {"j": {"experiment": EXP, key: value}}))
    assert "'j'" in msg and f"key '{key}'" in msg


# -- select --------------------------------------------------------------------------------
@pytest.fixture
def tagged(tmp_path):
    return load_profile(
        str(
            write(
                tmp_path,
                {
                    "*": {"experiment": EXP, "tags": ["all"]},
                    "alpha": {"tags": ["all", "vision"]},
                    "beta": {"tags": ["all", "text"]},
                    "gamma": {"tags": ["all", "vision", "big"]},
                    "delta": {},
                },
            )
        )
    )


def test_select_all_in_profile_order(tagged):
    assert [j.name for j in tagged.select()] == ["alpha", "beta", "gamma", "delta"]
    assert [j.name for j in tagged.select([], [])] == ["alpha", "beta", "gamma", "delta"]


def test_select_by_name_keeps_profile_order(tagged):
    assert [j.name for j in tagged.select(["gamma", "alpha"])] == ["alpha", "gamma"]


def test_select_unknown_name_lists_valid(tagged):
    with pytest.raises(ProfileError) as info:
        tagged.select(["alpha", "omega"])
    msg = str(info.value)
    assert "omega" in msg
    for name in ("alpha", "beta", "gamma", "delta"):
        assert name in msg.split("valid names", 1)[1]


def test_select_by_tags(tagged):
    assert [j.name for j in tagged.select(tags=["vision"])] == ["alpha", "gamma"]
    assert [j.name for j in tagged.select(tags=["text", "big"])] == ["beta", "gamma"]
    assert [j.name for j in tagged.select(tags=["all"])] == ["alpha", "beta", "gamma", "delta"]
    # names and tags together: both must hold
    assert [j.name for j in tagged.select(["alpha", "beta"], ["vision"])] == ["alpha"]


def test_select_unknown_tag_lists_known(tagged):
    with pytest.raises(ProfileError) as info:
        tagged.select(tags=["audio"])
    msg = str(info.value)
    assert "audio" in msg
    for tag in ("all", "big", "text", "vision"):
        assert tag in msg


def test_select_quick_by_tag():
    prof = load_profile("quick")
    assert [j.name for j in prof.select(tags=["harness"])] == ["calibration"]


# -- CLI -----------------------------------------------------------------------------------
def test_cli_bad_profile_is_one_line_error(tmp_path):
    bad = write(tmp_path, '{\n  "a": {\n    "experiment": "x:y",\n  }\n}\n', "bad_suite.json")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "milarun", "jobs", str(bad), "--no-cgexec", "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("milarun: error:")
    assert "bad_suite.json" in line
    assert "line" in line and "line 4" in line
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert not out.exists()  # nothing ran, nothing written


def test_nan_max_duration_rejected(tmp_path):
    path = write(tmp_path, '{"j": {"experiment": "' + EXP + '", "max_duration": NaN}}')
    msg = error_of(path)
    assert "key 'max_duration'" in msg
