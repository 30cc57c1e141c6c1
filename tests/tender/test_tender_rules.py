"""TenderRules (issue 52): a threshold is one field, and the rest derives from it: tender
init's options and their help, the written tender and its ``about``, the checks of the values
asked for and of a file read back. A tender written before loads with the same rules."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest
from coleo import Option, default, run_cli, with_extras

from conftest import DATA, milarun
from milarun import errors
from milarun.cli.tender import rule_options
from milarun.report import build
from milarun.results import tender_rules
from milarun.results.tender_rules import TenderRules, rule_field
from milarun.tender import rules

H200_TENDER = DATA / "gpu-runs" / "h200-2026-11-28" / "tender.json"

# A threshold added to the rules: one field, nothing else.
QUEUE = rule_field(
    None,
    "a new limit: every run's queue wait at most this",
    unit="ms",
    above=True,
    high=1000.0,
    flag="--max-queue",
)
Extended = dataclasses.make_dataclass(
    "Extended", [("max_queue_ms", float | None, QUEUE)], bases=(TenderRules,), frozen=True
)


@with_extras(rule_options(Extended))
def command() -> dict:
    # The profile (an option of the command's own)
    profile: Option & str = default("quick")
    __options__: argparse.Namespace = default(argparse.Namespace())
    return {**vars(__options__), "profile": profile}


def test_a_threshold_added_is_an_option_with_its_help_and_a_rule_of_the_file(capsys):
    given = run_cli(command, argv=["--max-queue", "250", "--repeat", "1", "--require-doctor"])
    asked = Extended.from_options(given)
    assert (asked.max_queue_ms, asked.repeat, asked.require_doctor) == (250.0, 1, True)  # type: ignore[attr-defined]
    with pytest.raises(SystemExit):
        run_cli(command, argv=["--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert "--max-queue MS A new limit: every run's queue wait at most this (ms; none by" in helped
    written = rules.make_tender("quick", None, asked, names=["polynome"])
    assert written["max_queue_ms"] == 250.0 and written["repeat"] == 1
    assert Extended.from_dict(written) == asked
    assert tender_rules.about(Extended)["max_queue_ms"].startswith("a new limit")
    assert tender_rules.problem(written, Extended) is None
    assert tender_rules.problem({**written, "max_queue_ms": 5000}, Extended) == (
        "'max_queue_ms' 5000 is not a number above 0, at most 1000"
    )
    with pytest.raises(errors.TenderError, match=r"--max-queue 0: must be a number above 0"):
        rules.make_tender("quick", None, Extended(max_queue_ms=0), names=["polynome"])  # type: ignore[call-arg]


def _other_than_default(rule: tender_rules.Rule) -> object:
    if rule.kind is bool:
        return True
    value = (rule.low + rule.high) / 2 if rule.below else rule.high
    return rule.kind(value)


def test_every_rule_is_an_option_of_tender_init_and_lands_in_the_file(tmp_path):
    helped = milarun("tender", "init", "--help", env={"COLUMNS": "1000"})
    assert helped.returncode == 0, helped.stderr
    words = " ".join(helped.stdout.split())
    wanted = {rule.name: _other_than_default(rule) for rule in tender_rules.described()}
    argv: list[str] = []
    for rule in tender_rules.described():
        assert " ".join(rule.help_text().replace("%%", "%").split()) in words, rule.name
        assert wanted[rule.name] != rule.default, rule.name
        argv += [rule.option] if rule.kind is bool else [rule.option, str(wanted[rule.name])]
    out = tmp_path / "tender.json"
    done = milarun("tender", "init", "--profile", "quick", "--name", "polynome", *argv, "-o", out)
    assert done.returncode == 0, done.stderr
    assert rules.load_tender(out).rules == TenderRules(**wanted)  # type: ignore[arg-type]
    data = json.loads(out.read_text())
    assert data["acceptance"] == {"margin": wanted["margin"], "risk": wanted["risk"]}
    assert set(tender_rules.about()) <= set(data) and data["about"] == rules.ABOUT


def test_a_value_out_of_range_is_refused_on_the_command_line_naming_the_option(tmp_path):
    done = milarun("tender", "init", "--risk", "0.5", "-o", tmp_path / "t.json")
    assert done.returncode == 1 and not (tmp_path / "t.json").exists()
    assert "--risk 0.5: must be a number above 0, below 0.5" in done.stderr


def test_the_h200_tender_written_before_loads_with_the_same_rules():
    tender = rules.load_tender(H200_TENDER)
    assert tender.rules == TenderRules(
        repeat=1, allow_overrides=True, require_challenge=True, require_doctor=True
    )
    data = json.loads(H200_TENDER.read_text())
    for key, value in tender.rules.to_dict().items():  # the rules it predates read as off
        assert data.get(key, value) == value, key
    assert "require_node_power" not in data and "max_ttft_p99_ms" not in data


def test_the_default_failure_rate_is_the_report_s():
    assert TenderRules().max_failure_rate == build.FAILURE_RATE_LIMIT
