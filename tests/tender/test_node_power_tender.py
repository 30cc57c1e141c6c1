"""A tender may ask for node power (issue 51): `tender init --require-node-power`, verify's
`node-power` rule FAILs a bid whose scored runs lack the node's energy from a BMC (naming the
tests), and the ranking of bids packed with that tender is on node power without
`--node-power`. Synthetic bids (bidkit), in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bidkit
from conftest import milarun
from milarun.errors import TenderError
from milarun.results.tender_rules import TenderRules
from milarun.tender import bids, package, ranking, render, rules, verify

RATES = {"quick.polynome": 40_000.0, "quick.sine_wave": 900.0}
TESTS = ["polynome", "sine_wave"]

pytestmark = pytest.mark.xdist_group(name="tender_node_power")


def packed(root: Path, tender: Path, **run: float) -> Path:
    """A bid of RATES packed with ``tender``; ``run``: synthetic_run's watts, node_watts."""
    folder = bidkit.synthetic_run(root / "run", RATES, devices=1, **run)
    return package.make_package(folder, root / "bid.tar.gz", tender).out


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """Two tenders (requiring node power or not), and for each two bids to rank: one whose
    runs carry the node's energy (a BMC at 1,200 W), one with GPU power only (300 W);
    and, to verify, two CPU bids (no GPU power, which the evidence rule would hold against
    their empty GPU monitors): with the node's energy and without."""
    root = tmp_path_factory.mktemp("nodepower")
    out = {}
    for name, strict in (("strict", True), ("lax", False)):
        tender = bidkit.tender(root / f"{name}.json", TESTS, require_node_power=strict)
        out[name] = tender
        out[f"{name}-node"] = packed(root / f"{name}-node", tender, watts=300.0, node_watts=1200.0)
        out[f"{name}-gpu"] = packed(root / f"{name}-gpu", tender, watts=300.0)
    out["cpu-node"] = packed(root / "cpu-node", out["strict"], node_watts=1200.0)
    out["cpu"] = packed(root / "cpu", out["strict"])
    return out


def node_rule(bid: Path, tender: Path) -> tuple[bool, str]:
    found = verify.verify(bid, tender)
    (check,) = [c for c in found.checks if c.rule == "node-power"]
    assert "\n" not in check.evidence
    return check.ok, check.evidence


def test_tender_init_writes_the_switch(tmp_path):
    out = tmp_path / "tender.json"
    init = ["tender", "init", "--profile", "quick", "--name", "polynome", "--repeat", "1"]
    done = milarun(*init, "--require-node-power", "-o", out)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["require_node_power"] is True and "require_node_power" in data["about"]
    assert rules.load_tender(out).rules.require_node_power
    assert rules.make_tender("quick", None, TenderRules(repeat=1))["require_node_power"] is False


def test_a_bid_with_the_node_s_energy_passes(made):
    assert node_rule(made["cpu-node"], made["strict"]) == (
        True,
        "6 scored run(s), each with the node's energy from its BMC",
    )
    found = verify.verify(made["cpu-node"], made["strict"])
    assert found.passed, verify.to_text(found)


def test_a_bid_without_it_fails_naming_the_tests(made):
    ok, said = node_rule(made["cpu"], made["strict"])
    assert not ok
    assert said == (
        "2 test(s) without the node's energy from a BMC in every scored run: quick.polynome "
        "(3 of 3 run(s): no BMC configured), quick.sine_wave (3 of 3 run(s): no BMC configured)"
    )
    found = verify.verify(made["cpu"], made["strict"])
    assert [c.rule for c in found.checks if not c.ok] == ["node-power"]
    assert found.exit_code == verify.RULE_FAILED


def test_one_run_whose_bmc_gave_no_figure_fails_with_its_reason(made, tmp_path):
    why = "too few BMC readings: 1 in the 9.0 s steady window"

    def refused(data: dict) -> None:
        data["node_energy"] = {**data["node_energy"], "examples_per_joule": None, "reason": why}

    edit = lambda folder: bidkit.edit_results(folder, refused)  # noqa: E731
    one_less = bidkit.edited(made["cpu-node"], tmp_path, edit)
    ok, said = node_rule(one_less, made["strict"])
    assert not ok and said.endswith(
        "1 test(s) without the node's energy from a BMC in every scored run: quick.polynome "
        "(1 of 3 run(s): too few BMC readings: 1 in the 9.0 s steady window)"
    )


def test_not_required_the_rule_says_what_it_found(made):
    assert node_rule(made["cpu"], made["lax"]) == (
        True,
        "not required by the tender: 0 of 6 scored run(s) carry the node's energy from its BMC",
    )


def test_the_ranking_is_on_node_power_where_the_packed_tender_asks(made):
    costs = ranking.Costs(power_cost=0.2)  # no --node-power: the packed tender says so
    strict = bids.rank([made["strict-node"], made["strict-gpu"]], [250_000.0, 240_000.0], costs)
    assert strict.costs.node_power
    node, gpu = strict.rows
    assert node.power_source == "node" and node.watts == pytest.approx(1200.0)
    assert gpu.power_source is None and gpu.tco is None
    assert strict.metric == "price_per_score"
    assert any("asks for node power" in n for n in strict.notes)
    assert "on the whole node's power (the tender asks for it)" in render.to_text(strict)
    # the same bids under a tender that does not ask: the GPUs' power is ranked on its own
    lax = bids.rank([made["lax-node"], made["lax-gpu"]], [250_000.0, 240_000.0], costs)
    assert not lax.costs.node_power and lax.rows[1].power_source == "GPUs"
    assert not any("asks for node power" in n for n in lax.notes)


def test_a_bad_switch_is_a_one_line_error(tmp_path):
    tender = {
        **rules.make_tender("quick", None, TenderRules(repeat=1)),
        "require_node_power": "yes",
    }
    path = tmp_path / "tender.json"
    path.write_text(json.dumps(tender))
    with pytest.raises(TenderError, match="'require_node_power' is not true/false"):
        rules.load_tender(path)
