"""Like with like inside a folder (milarun.report.variants): runs of one test made with other
settings are reported apart, never averaged with the test's own runs."""

from __future__ import annotations

import pytest

from conftest import milarun
from milarun.measure.call import plan_rerun
from milarun.report import summary
from resultfactory import result, write

FUNCTION = "milabench.models.polynome:main"


def run(job_id: str, rate: float | None, argv: list[str], **extra):
    data = result("quick.polynome", job_id, rate, **extra)
    data["call"] = {"function": FUNCTION, "argv": argv, "arguments": {}}
    return data


BASE = ["--min-slices", "12", "--batch-size", "256"]


def test_other_arguments_are_a_test_of_their_own():
    runs = [
        run("0.0", 100.0, BASE),
        run("1.0", 102.0, BASE),
        run("2.0", 40.0, BASE + ["--batch-size", "64"]),
    ]
    found = summary.summarize(runs)
    assert sorted(found) == ["quick.polynome", "quick.polynome [--batch-size 64]"]
    assert found["quick.polynome"]["train"]["mean"] == pytest.approx(101.0)
    apart = found["quick.polynome [--batch-size 64]"]
    assert (apart["n"], apart["variant_of"], apart["differs"]) == (
        1,
        "quick.polynome",
        "--batch-size 64",
    )


def test_measurement_flags_and_failures_stay_with_their_test():
    runs = [
        run("0.0", 100.0, BASE),
        run("1.0", 100.0, ["--min-slices", "40", *BASE[2:]]),
        run("2.0", 90.0, BASE + ["--seed", "7"]),
        run("3.0", None, BASE, failure={"kind": "crash", "message": "died"}, dataset=None),
    ]
    found = summary.summarize(runs)
    assert list(found) == ["quick.polynome"]
    assert (found["quick.polynome"]["n"], found["quick.polynome"]["failures"]) == (4, 1)


def test_other_data_or_version_is_apart_and_named():
    data = {"name": "fake_imagenet", "size": 10000, "synthetic": False}
    runs = [
        run("0.0", 100.0, BASE, dataset=data),
        run("1.0", 100.0, BASE, dataset=data),
        run("2.0", 100.0, BASE, dataset={**data, "synthetic": True}),
        run("3.0", 100.0, BASE, dataset=data, milarun_version="0.2.0"),
    ]
    found = summary.summarize(runs)
    assert sorted(k for k in found if k != "quick.polynome") == [
        "quick.polynome [data fake_imagenet 10000 synthetic]",
        "quick.polynome [milarun 0.2.0]",
    ]


def test_runs_without_nocache_are_apart_from_those_with_it():
    def isolated(nocache):
        return {"cgroups": {}, "cpus": [0], "memory_limit": None, "nocache": nocache}

    runs = [
        run("0.0", 100.0, BASE, isolation=isolated(True)),
        run("1.0", 100.0, BASE, isolation=isolated(True)),
        run("2.0", 130.0, BASE, isolation=isolated(False)),
        run("3.0", None, BASE, failure={"kind": "crash", "message": "died"}, isolation=None),
    ]
    found = summary.summarize(runs)
    assert sorted(found) == ["quick.polynome", "quick.polynome [no nocache]"]
    assert found["quick.polynome"]["nocache"] is True and found["quick.polynome"]["n"] == 3
    assert found["quick.polynome [no nocache]"]["nocache"] is False


def test_the_report_warns_and_does_not_score_the_variant(tmp_path):
    for i, rate in enumerate([100.0, 102.0]):
        write(tmp_path, run(f"{i}.0", rate, BASE))
    write(tmp_path, run("9.0", 40.0, BASE + ["--batch-size", "64"]))
    done = milarun("report", tmp_path, "--weights", "quick")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert (
        "quick.polynome: 1 run(s) with other settings (--batch-size 64) are reported "
        "apart as 'quick.polynome [--batch-size 64]'"
    ) in text


def test_rerun_writes_beside_the_original(tmp_path, monkeypatch):
    monkeypatch.delenv("MILARUN_DEADLINE", raising=False)
    folder = tmp_path / "day"
    original = write(folder, run("0.0", 100.0, BASE, dataroot=str(tmp_path)))
    call = plan_rerun(original, None, ["--batch-size", "64"], dataroot=tmp_path)
    assert call.outdir.parent == tmp_path and call.outdir.name.startswith("day.rerun-")
    assert call.argv[-2:] == ["--batch-size", "64"]


def test_compare_with_another_suite_is_refused(tmp_path):
    write(tmp_path, run("0.0", 100.0, BASE))
    done = milarun("report", tmp_path, "--compare", "standard/v100")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "suite quick against suite standard" in done.stderr
