"""``milarun report BID... --rank``: each bid package opened safely, scored as the report
scores a results folder, and the bids ranked (milarun.tender.ranking)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from milarun import results
from milarun.errors import InputError, TenderError
from milarun.report import about, build, stats, summary
from milarun.report.busy import busy_of
from milarun.report.summary_entry import SummaryEntry, entries
from milarun.report.weights import default_weights, load_weights
from milarun.tender import package, ranking, rules, verify


def _watts(entry: SummaryEntry) -> float | None:
    """The machine's power while a test ran: its instances' mean GPU watts x the instances
    that ran side by side (one per device; a distributed run's record covers its GPUs)."""
    watts = results.positive((entry.energy or {}).get("watts"))
    return None if watts is None else watts * (len(entry.pergpu or {}) or 1)


def _node_watts(entry: SummaryEntry) -> float | None:
    """The whole node's power while a test ran, from its BMC (report.nodeenergy): already
    the machine's, whatever the instances that shared it."""
    return results.positive((entry.node_energy or {}).get("node_watts"))


def figures(path: Path, weights_spec: str | None, price: float | None) -> ranking.BidFigures:
    """One bid's figures from its package (extracted into a temporary folder)."""
    with tempfile.TemporaryDirectory(prefix="milarun-rank-") as tmp:
        opened = verify.open_package(path, Path(tmp))
        loaded = opened.loaded
        if not loaded.results:
            raise TenderError(f"{path}: the package holds no usable result")
        summ = summary.summarize(loaded.results)
        # verified as opened here: a second opening streamed and read the whole package again
        verified_ok, verified = verified_against_packed(path, opened)
        asks_node_power = _asks_node_power(opened)
    weights = load_weights(weights_spec) if weights_spec else default_weights(list(summ))
    if weights is None:
        raise TenderError(f"{path}: tests of several suites: give --weights")
    report = build.build_report(summ, weights=weights)  # the score: the summary suffices
    scored = report.scored
    perf_adj = {t: float(report.table.loc[t, "perf_adj"]) for t in scored}
    typed = entries(summ)
    runs = {t: stats.RunSet(list(typed[t].rates or []), typed[t].failures) for t in scored}
    watts = {t: w for t in scored if (w := _watts(typed[t])) is not None}
    node_watts = {t: w for t in scored if (w := _node_watts(typed[t])) is not None}
    busy = busy_of(summ)
    return ranking.BidFigures(
        name=Path(path).name.removesuffix(".tar.gz"),
        score=report.score,
        score_ci=report.score_ci,
        perf_adj=perf_adj,
        runs=runs,
        weights={t: weights[1][t] for t in scored},
        watts=watts,
        node_watts=node_watts,
        price=price,
        busy_runs=busy.runs,
        measured_runs=busy.of_runs,
        busy_share=busy.worst,
        about=about.about(loaded.results, many_nodes=False),
        verified=verified,
        verified_ok=verified_ok,
        node_power_asked=asks_node_power,
    )


def _asks_node_power(opened: verify.Opened) -> bool:
    """Whether the tender packed with the bid requires the node's power (a BMC)."""
    tender = opened.root / package.TENDER
    try:
        return tender.is_file() and rules.load_tender(tender).rules.require_node_power
    except InputError:
        return False  # verified_against_packed says why it could not be read


def verified_against_packed(path: Path, opened: verify.Opened) -> tuple[bool | None, str]:
    """What `milarun verify` says of the opened package against the tender packed with it
    (its SHA-256 named: the buyer checks it is theirs); None where the package holds none."""
    tender = opened.root / package.TENDER
    if not tender.is_file():
        return None, "not verified: no tender in the package (`milarun verify BID --tender FILE`)"
    try:
        rules_read = rules.load_tender(tender)
        found = verify.verify_opened(path, tender, rules_read, opened)
        sha = rules_read.sha256[:12]
    except InputError as err:
        return False, f"not verified: {str(err)[:200]}"
    failed = [c.rule for c in found.checks if not c.ok]
    said = f"FAIL: {', '.join(failed)}" if failed else f"PASS: every rule ({len(found.checks)})"
    if found.acceptance:
        said += f"; declared figures: {found.acceptance}"
    return not failed, f"{said}, against the tender packed with it (SHA-256 {sha}...)"


def rank(
    paths: list[Path],
    prices: list[float] | None,
    costs: ranking.Costs,
    weights_spec: str | None = None,
) -> ranking.Ranking:
    """Open, score and rank the bids (prices in the same order as the packages)."""
    if prices is not None and len(prices) != len(paths):
        raise TenderError(
            f"--price: {len(prices)} price(s) for {len(paths)} bid(s); give one per bid, "
            "in the same order"
        )
    bids = [
        figures(p, weights_spec, prices[i] if prices is not None else None)
        for i, p in enumerate(paths)
    ]
    ranked = ranking.rank_bids(bids, costs)
    ranked.bids = bids
    return ranked
