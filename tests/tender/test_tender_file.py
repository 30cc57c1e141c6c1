"""`milarun tender init`: the buyer's rules, written readable and checked on the way in."""

from __future__ import annotations

import json

import pytest

import bidkit
from conftest import milarun
from milarun import errors
from milarun.results.tender_rules import TenderRules
from milarun.run.profile import find_profile
from milarun.tender import rules


def test_tender_init_writes_the_rules_field_by_field(tmp_path):
    out = tmp_path / "tender.json"
    done = milarun(
        "tender", "init", "--profile", "quick", "--weights", "quick", "--repeat", "10",
        "--require-cgroups", "--margin", "0.9", "--risk", "0.01", "-o", out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "profile quick" in done.stdout and "10 run(s)" in done.stdout
    data = json.loads(out.read_text())
    shipped = find_profile("quick")
    assert data["profile"]["sha256"] == rules.sha256_bytes(shipped.read_bytes())
    assert data["profile"]["jobs"]["quick.polynome"]["argv"] == bidkit.quick_argv("quick.polynome")
    assert data["weights"]["values"]["quick.polynome"] == 4.0
    assert data["repeat"] == 10 and data["require_cgroups"] is True
    assert data["allow_overrides"] is False and data["max_failure_rate"] == 0.01
    assert data["acceptance"] == {"margin": 0.9, "risk": 0.01}
    assert set(rules.ABOUT) <= set(data) | {"acceptance"} and data["about"] == rules.ABOUT
    assert rules.load_tender(out).rules.repeat == 10
    with pytest.raises(errors.TenderError, match="file exists"):
        bidkit.tender(out, ["polynome"])
    assert json.loads(out.read_text()) == data


@pytest.mark.parametrize(
    "option,value", [("repeat", 0), ("margin", 0.0), ("risk", 0.5), ("max_failure_rate", 2.0)]
)
def test_values_out_of_range_are_refused_naming_the_option(tmp_path, option, value):
    with pytest.raises(errors.TenderError, match=f"--{option.replace('_', '-')}"):
        bidkit.tender(tmp_path / "t.json", ["polynome"], **{option: value})
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize(
    "change,field",
    [
        (lambda d: d.update(kind="other"), "not a milarun tender"),
        (lambda d: d["profile"].update(sha256="abc"), "profile.sha256"),
        (lambda d: d.update(repeat=1.5), "'repeat'"),
        (lambda d: d["acceptance"].update(risk=0.9), "acceptance.risk"),
        (lambda d: d["profile"]["jobs"]["quick.polynome"].update(argv="--x"), "quick.polynome"),
        (lambda d: d["weights"]["values"].update(x=float("inf")), "weights.values"),
        (lambda d: d.update(require_cgroups="yes"), "require_cgroups"),
    ],
)
def test_a_damaged_tender_is_refused_naming_the_field(tmp_path, change, field):
    path = bidkit.tender(tmp_path / "t.json", ["polynome"])
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(errors.TenderError, match=field) as caught:
        rules.load_tender(path)
    assert "\n" not in str(caught.value) and "tender init" in str(caught.value)


def test_a_profile_of_ones_own_needs_its_weights_named(tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_bytes(find_profile("quick").read_bytes())
    with pytest.raises(errors.TenderError, match="give --weights"):
        rules.make_tender(str(mine), None, TenderRules(repeat=1), names=["polynome"])
    with pytest.raises(errors.TenderError, match="no weight for any selected test"):
        rules.make_tender(str(mine), "quick", TenderRules(repeat=1), names=["polynome"])
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps({"mine.polynome": 1}))
    data = rules.make_tender(str(mine), str(weights), TenderRules(repeat=1), names=["polynome"])
    assert data["profile"]["name"] == "mine" and data["weights"]["values"] == {"mine.polynome": 1}
