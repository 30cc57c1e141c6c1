"""The shipped profiles and weights: every job's arguments are accepted by its test."""

from __future__ import annotations

import importlib
import json

import pytest

from milarun.measure.experiment import Experiment
from milarun.report.weights import WEIGHTS_DIR, load_weights
from milarun.run.profile import PROFILE_DIR, arguments_to_argv, load_profile

PROFILES = sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


class Parsed(Exception):
    """Raised right after a test parsed its arguments: nothing is trained."""


class ParseOnly(Experiment):
    def parse_args(self, parser, argv, max_count=None, seed=1234):  # type: ignore[override]
        self.parsed = super().parse_args(parser, argv, max_count=max_count, seed=seed)
        raise Parsed()


def test_the_legacy_suites_ship():
    assert {"quick", "standard", "10gb", "5gb"} <= set(PROFILES)


MODERN = ["llm", "bert", "resnet50", "vit", "diffusion", "llm-scaling", "gemm"]


@pytest.mark.parametrize("name", ["modern", "modern-24gb", "quick"])
def test_the_modern_suites_ship_every_modern_test(name):
    jobs = load_profile(name).jobs
    assert set(MODERN) <= set(jobs)
    assert jobs["llm-scaling"].partition == "gpu-progression"
    assert "scaling" in jobs["llm-scaling"].tags  # what `milarun slurm scaling` runs
    for test in MODERN:
        assert "modern" in jobs[test].tags, (name, test)


@pytest.mark.parametrize("name", PROFILES)
def test_every_job_accepts_its_arguments(name, tmp_path):
    for job in load_profile(name).select([], []):
        module, function = job.experiment.split(":")
        main = getattr(importlib.import_module(module), function)
        exp = ParseOnly(job.fullname, outdir=tmp_path, dataroot=tmp_path)
        with pytest.raises(Parsed):
            main(exp, arguments_to_argv(job.arguments))
        # Every run ends by measurement: a steady window of at least 8 slices (quick) or
        # one long past the warm-up (the GPU suites, which also keep the legacy minimum work).
        assert exp.min_slices is not None, f"{job.fullname}: no --min-slices"
        if name == "quick":
            assert exp.max_count is None, f"{job.fullname}: a --max-count tuned to a machine"
            assert exp.min_slices - 2 >= 8, job.fullname
        elif name == "gpu-check":  # one full steady window, no legacy minimum work
            assert exp.max_count is None, job.fullname
            assert exp.min_slices >= 22, job.fullname
        elif name == "inference":  # new: a full steady window per batch size's headline
            assert exp.max_count is None, job.fullname
            assert exp.min_slices >= 22, job.fullname
        elif name.startswith("modern"):  # a new suite: no legacy minimum work to keep
            assert exp.max_count is None, job.fullname
            assert exp.min_slices >= 40, job.fullname
        else:
            assert exp.max_count is not None, f"{job.fullname}: no legacy --max-count"
            assert exp.min_slices >= 40, job.fullname


@pytest.mark.parametrize("name", PROFILES)
def test_weights_cover_exactly_the_profile(name):
    _, weights = load_weights(name)
    jobs = load_profile(name).select([], [])
    expected = set()
    for job in jobs:
        if job.partition == "gpu-progression":
            expected |= {t for t in weights if t.startswith(job.fullname + ".")}
            assert expected, f"{name}: no weights for {job.fullname}.<k>"
        else:
            expected.add(job.fullname)
    assert set(weights) == expected


def test_standard_weights_follow_the_legacy_rule():
    weights = json.loads((WEIGHTS_DIR / "standard.json").read_text())
    for test, entry in weights.items():
        short = test.split(".", 1)[1]
        if short.startswith("toy") or short == "cart":
            assert entry["weight"] == 4, test
        elif short.startswith("scaling."):
            assert entry["weight"] == 2, test
        else:
            assert entry["weight"] == 8, test
    assert {f"standard.scaling.{k}" for k in range(1, 9)} <= set(weights)


def test_the_gpu_check_runs_the_standard_tests_as_the_standard_suite_does():
    """gpu-check is standard with only its length changed: same tests, same arguments."""
    standard, check = load_profile("standard").jobs, load_profile("gpu-check").jobs
    assert list(check) == list(standard)
    for name, job in check.items():
        expected = {
            k: v
            for k, v in standard[name].arguments.items()
            if k not in ("--max-count", "--min-slices")
        }
        got = {k: v for k, v in job.arguments.items() if k != "--min-slices"}
        assert got == expected, name
        assert (job.experiment, job.partition) == (
            standard[name].experiment,
            standard[name].partition,
        )
    assert {
        k: v["weight"] for k, v in json.loads((WEIGHTS_DIR / "gpu-check.json").read_text()).items()
    } == {
        k.replace("standard.", "gpu-check.", 1): v["weight"]
        for k, v in json.loads((WEIGHTS_DIR / "standard.json").read_text()).items()
    }


# What the 2020 10gb and 5gb profiles (mila-ao-2020-2) changed from its standard profile:
# every other job, argument and key is the standard one, and neither runs scaling.
LEGACY_SMALL_SUITES = {
    "10gb": {
        "convnet": {"--arch": "resnet50"},
        "convnet_fp16": {"--arch": "resnet50", "--batch-size": 64},
        "ssd": {"--batch-size": 16},
    },
    "5gb": {
        "convnet": {"--arch": "resnet50", "--batch-size": 8},
        "convnet_fp16": {"--arch": "resnet50", "--batch-size": 16},
        "fast_style": {"--batch-size": 64},
        "ssd": {"--batch-size": 8},
        "translator": {"--batch-size": 16},
    },
}


@pytest.mark.parametrize("name", sorted(LEGACY_SMALL_SUITES))
def test_the_small_suites_are_standard_with_the_2020_changes(name):
    standard, small = load_profile("standard").jobs, load_profile(name).jobs
    assert set(small) == set(standard) - {"scaling"}
    for job, definition in small.items():
        expected = {**standard[job].arguments, **LEGACY_SMALL_SUITES[name].get(job, {})}
        assert definition.arguments == expected, f"{name}.{job}"
        assert (definition.experiment, definition.partition, definition.exec_prefix) == (
            standard[job].experiment,
            standard[job].partition,
            standard[job].exec_prefix,
        ), f"{name}.{job}"
