"""`milarun tender init`, `package`, `verify` and `report BID... --rank` (coleo): parse,
call milarun.tender, print."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

from coleo import Option, default, tooled, with_extras

from milarun import errors
from milarun.cli.options import Declared, declared_options, no_test_args, split_names
from milarun.results import tender_rules

# Each command imports the rest of the tender wing when it runs (pandas, numpy: never in
# `milarun run`).


def rule_options(rules: type[tender_rules.TenderRules]) -> Callable[[], None]:
    """One option per field of ``rules``, its help the field's own words (coleo extras)."""
    return declared_options(
        [
            Declared(rule.name, rule.option, rule.kind, rule.help_text(), rule.metavar)
            for rule in tender_rules.described(rules)
        ]
    )


RULE_OPTIONS = rule_options(tender_rules.TenderRules)  # tender init's rules


class TenderCommands:
    """The call for tenders: the buyer's rules (tender init)."""

    @with_extras(RULE_OPTIONS)
    def init(test_args: list[str]) -> int:
        """Write the rules of one call for tenders (tender.json)."""
        # Profile name (quick, standard, ...) or JSON file the bids must run
        # [options: --profile]
        # [metavar: NAME]
        profile_spec: Option & str = default("standard")
        # Weights the bids are scored with (default: the profile's own)
        weights: Option & str = default(None)
        # Only these jobs of the profile (space or comma separated)
        # [nargs: +]
        name: Option = default([])
        # Only jobs with one of these tags
        # [nargs: +]
        tags: Option = default([])
        # The tender file to write (never over an existing file)
        # [alias: -o]
        out: Option & str
        # the parsed options: the rules' values (RULE_OPTIONS), those given
        __options__: argparse.Namespace = default(argparse.Namespace())

        from milarun.tender import rules

        no_test_args("tender init", test_args)
        asked = tender_rules.TenderRules.from_options(vars(__options__))
        tender = rules.make_tender(
            profile_spec, weights, asked, names=split_names(name), tags=split_names(tags)
        )
        rules.write_tender(Path(out), tender)
        tests = tender["profile"]["tests"]
        print(
            f"tender written to {out}: profile {tender['profile']['name']} "
            f"({len(tests)} test(s)), weights {tender['weights']['name']}, "
            f"{asked.repeat} run(s) per test and device, milarun {tender['milarun_version']}"
        )
        return 0


def package(test_args: list[str]) -> int:
    """Pack a results folder into a bid package a buyer can verify (bid.tar.gz)."""
    # The results folder of the bid's runs
    # [positional]
    results_dir: Option
    # The package to write (never over an existing file)
    # [alias: -o]
    out: Option & str
    # The tender the bid answers (packed with it)
    tender: Option & str = default(None)
    # The figures the vendor declares: {"tests": {test: rate}, "score": score}
    declared: Option & str = default(None)

    from milarun.tender.package import make_package

    no_test_args("package", test_args)
    packed = make_package(
        Path(results_dir),
        Path(out),
        Path(tender) if tender else None,
        Path(declared) if declared else None,
    )
    for note in packed.notes:
        print(f"note: {note}")
    print(
        f"packed {packed.results} result(s), {packed.files} file(s) "
        f"({packed.bytes_in / 2**20:,.1f} MiB) into {packed.out}"
    )
    return 0


def verify(test_args: list[str]) -> int:
    """Check a bid package against a tender: one line per rule, and the declared figures."""
    # The bid package (bid.tar.gz)
    # [positional]
    bid: Option
    # The tender file (tender.json) (required)
    tender: Option & str
    # Output format: text or json
    format: Option = default("text")

    from milarun.tender.verify import to_json, to_text
    from milarun.tender.verify import verify as verify_bid

    no_test_args("verify", test_args)
    if format not in ("text", "json"):
        raise errors.UsageError(f"--format {format}: use text or json")
    found = verify_bid(Path(bid), Path(tender))
    print((to_json if format == "json" else to_text)(found), end="")
    return found.exit_code


def _prices(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        prices = [float(p) for p in text.split(",")]
    except ValueError:
        raise errors.UsageError(
            f"--price {text}: give dollars, one per bid: 250000,310000"
        ) from None
    if not all(0 < p < math.inf for p in prices):
        raise errors.UsageError(f"--price {text}: every price must be a positive number")
    return prices


def one_price(text: str | None) -> float | None:
    """`report`'s --price of one results folder."""
    prices = _prices(text)
    if prices is not None and len(prices) != 1:
        raise errors.UsageError(f"--price {text}: one price for one results folder")
    return prices[0] if prices else None


@tooled
def rank_bids(
    sources: list[str],
    price: str | None,
    power_cost: float | None,
    weights: str | None,
    fmt: str,
    html: str | None,
    title: str | None,
) -> int | None:
    """`report BID... --rank`; None when the report is of one results folder."""
    # Rank bid packages (bid.tar.gz ...): price/score, energy, TCO, P(best)
    rank: Option & bool = default(False)
    # With --rank and --power-cost: years of operation the energy is paid for
    years: Option & float = default(5.0)
    # With --rank and --power-cost: the data centre's power usage effectiveness
    pue: Option & float = default(1.0)
    # With --rank and --power-cost: the tender asks for the whole node's power (a BMC)
    node_power: Option & bool = default(False)

    if not rank:
        if len(sources) > 1 or sources[0].endswith(".tar.gz"):
            raise errors.UsageError(
                "give one results folder or summary; bid packages: `milarun verify BID "
                "--tender FILE` or `milarun report BID... --rank`"
            )
        return None
    from milarun.tender import bids, ranking, render

    if fmt not in render.FORMATS:
        raise errors.UsageError(f"--format {fmt}: use one of {', '.join(render.FORMATS)}")
    if not (0 < years < 100 and 1 <= pue < 10):
        raise errors.UsageError(f"--years {years} --pue {pue}: years in (0, 100), PUE in [1, 10)")
    if power_cost is not None and not 0 < power_cost < math.inf:
        raise errors.UsageError(f"--power-cost {power_cost}: a positive number of $/kWh")
    if html:
        from milarun.report.render.html import check_html_path, write_html

        check_html_path(Path(html))
    ranked = bids.rank(
        [Path(s) for s in sources],
        _prices(price),
        ranking.Costs(power_cost, years, pue, node_power),
        weights,
    )
    print(render.render(ranked, fmt), end="")
    if html:
        write_html(Path(html), render.to_html(ranked, title or "milarun: ranking of bids"))
        print(f"HTML report: {Path(html).resolve()}", file=sys.stderr)
    return 0
