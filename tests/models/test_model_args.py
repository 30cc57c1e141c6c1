"""--batch-size is checked by each model's argument parser (milabench.helpers.positive_int):
a batch of 0 examples is refused in one line before anything runs."""

from __future__ import annotations

import json
import re

import pytest

from conftest import ROOT, milarun
from modelrun import assert_rejected

MODELS = ROOT / "milabench" / "models"
# Every model that takes --batch-size (found in its source, so a new one is covered).
BATCHED = sorted(p.stem for p in MODELS.glob("*.py") if '"--batch-size"' in p.read_text())
# The ones that took a plain type=int before.
CONVERTED = ["calibration", "polynome", "reso", "scaling", "vae"]
REFUSAL = "argument --batch-size: 0 (must be >= 1)"


def test_every_batched_model_declares_batch_size_as_positive_int():
    assert set(CONVERTED) <= set(BATCHED)
    for name in BATCHED:
        declared = re.findall(
            r'add_argument\(\s*"--batch-size",\s*type=([\w.]+)', (MODELS / f"{name}.py").read_text()
        )
        assert declared == ["helpers.positive_int"], (name, declared)


@pytest.mark.parametrize("model", BATCHED)
def test_parser_refuses_a_batch_of_zero(model):
    assert_rejected(model, ["--batch-size", "0"], REFUSAL)


# Through `milarun run` (the harness path is the same for every model: the two quick ones)
@pytest.mark.parametrize("model", ["calibration", "polynome"])
def test_run_refuses_a_batch_of_zero_in_one_line(tmp_path, model):
    done = milarun(
        "run", f"milabench.models.{model}:main", "-o", tmp_path, "--", "--batch-size", "0"
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "Traceback" not in output, output
    named = [line for line in output.splitlines() if "--batch-size" in line]
    assert len(named) == 1 and REFUSAL in named[0], output
    (path,) = tmp_path.glob(f"{model}.J0.FAIL.*.json")
    failure = json.loads(path.read_text())["failure"]
    assert failure["kind"] == "exception", failure
    assert failure["message"] == f"bad test argument: {REFUSAL}", failure
