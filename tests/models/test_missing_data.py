"""Each model on an empty data folder stops at once with DataMissing naming the `milarun
dataset` command that makes its data, in this process (its own data check, which is what
differs between models). The path from there to a FAIL result through the CLI is the same
for all of them: test_vision_imagenet's test_missing_data_through_the_cli runs it in the fast
tier, each model's own CLI run is in the slow one."""

from __future__ import annotations

import importlib

import pytest

from milabench import datasets
from milarun.measure.experiment import Experiment


@pytest.mark.parametrize(
    ("model", "dataset"),
    [
        ("vae", "mnist"),
        ("reso", "bsds500"),
        ("wlm", "wiki2"),
        ("recom", "ml20m"),
        ("translator", "wmt16"),
        ("ssd", "coco"),
    ],
)
def test_a_model_without_its_data_stops_at_once(tmp_path, model, dataset):
    module = importlib.import_module(f"milabench.models.{model}")
    with pytest.raises(datasets.DataMissing, match=f"milarun dataset {dataset}"):
        module.main(Experiment("nodata", dataroot=tmp_path), [])
