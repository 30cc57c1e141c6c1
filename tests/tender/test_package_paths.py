"""Issue 49: a bid package names no path of the vendor's machine (bid.json kept the packer's
absolute folder path, and a cut-short run's folder with it)."""

from __future__ import annotations

import json
import tarfile

import bidkit
from milarun.tender import package


def test_bid_json_names_no_absolute_path(tmp_path):
    run = bidkit.synthetic_run(
        tmp_path / "vendor-home" / "run-42", {"quick.polynome": 40_000.0}, repeat=1,
        complete=False,
    )  # fmt: skip
    packed = package.make_package(run, tmp_path / "bid.tar.gz")
    with tarfile.open(packed.out) as tar:
        text = tar.extractfile(package.BID).read().decode()  # type: ignore[union-attr]
    facts = json.loads(text)
    assert facts["source"] == "run-42"
    assert str(tmp_path) not in text and "vendor-home" not in text, text
    assert facts["cut_short"] and "in the results folder" in facts["cut_short"][0]
    assert all(str(tmp_path) not in note for note in facts["notes"] + packed.notes)
