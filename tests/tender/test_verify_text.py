"""Issue 49: what `verify` prints. Numbers in thousands format, never e-notation (it printed
``320,121 - 1.23051e+06``); each note once (the missing doctor record was noted twice); and
its help shows --tender as the required option it is."""

from __future__ import annotations

import re

import pytest

import bidkit
from conftest import milarun
from milarun.tender import package, verify


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify-text")
    rates = {"quick.polynome": 1_230_510.0, "quick.sine_wave": 320_121.0}
    run = bidkit.synthetic_run(root / "run", rates, repeat=3)
    bid = package.make_package(run, root / "bid.tar.gz").out
    tender = bidkit.tender(root / "tender.json", ["polynome", "sine_wave"], repeat=3)
    return verify.to_text(verify.verify(bid, tender))


def test_numbers_in_thousands_format(checked):
    assert not re.search(r"\de[+-]\d", checked), checked
    line = next(ln for ln in checked.splitlines() if ln.startswith("  quick.polynome:"))
    assert re.match(r"  quick\.polynome: 1,2\d\d,\d\d\d \(", line), line


def test_each_note_once(checked):
    notes = checked.split("notes:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(notes) == len(set(notes)), notes
    assert sum("doctor" in n for n in notes) == 1, notes


def test_help_shows_tender_as_required():
    shown = milarun("verify", "--help")
    assert shown.returncode == 0, shown.stderr
    usage = " ".join(shown.stdout.split("positional arguments")[0].split())
    assert "--tender VALUE" in usage and "[--tender" not in usage, usage
    missing = milarun("verify", "bid.tar.gz")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "--tender" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def test_a_score_of_tests_run_once_has_no_interval(tmp_path):
    """An interval that holds single-run tests fixed is not the score's (issue 49)."""
    run = bidkit.synthetic_run(tmp_path / "run", {"quick.polynome": 40_000.0}, repeat=1, devices=1)
    bid = package.make_package(run, tmp_path / "bid.tar.gz").out
    tender = bidkit.tender(tmp_path / "tender.json", ["polynome"], repeat=1)
    found = verify.verify(bid, tender)
    assert found.score is not None and found.score_ci is None
    line = next(ln for ln in verify.to_text(found).splitlines() if ln.startswith("score "))
    assert "(no interval: 1 of 1 tests ran once)" in line and "95% CI" not in line, line
