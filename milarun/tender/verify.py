"""``milarun verify``: a bid package checked against a tender, and the declared figures judged.

The package is extracted into a temporary folder (milarun.tender.archive: every member
checked first) and only read: JSON results, manifests and records, never code. Every figure
is re-derived from the raw slices with the report's own code; each rule of
milarun.tender.checks gives one line with its evidence. Exit code: 0 when every rule passes
(and the declared figures, if any, are accepted), 1 when a rule fails, 3 when every rule
passes but a declared figure is rejected, 4 when one is inconclusive.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from milarun import results
from milarun.errors import InputError
from milarun.report import build, stats, summary
from milarun.report.render import format as fmt
from milarun.results import manifest
from milarun.results.folder import Loaded, load_dir
from milarun.results.run_manifest import MachineRecord, RunManifest
from milarun.tender import acceptance, archive, checks, package, rules
from milarun.tender.evidence import rule as evidence
from milarun.tender.freshness import doctor, fresh, node_power

# Every rule verify applies, in the order it prints them: the package's rules, then those
# that read the run folder and the tender's requirements.
VERIFY_RULES = (*checks.RULES, evidence.evidence, fresh, doctor, node_power)

RULE_FAILED, REJECTED, INCONCLUSIVE = 1, 3, 4


@dataclass
class Opened:
    """A package as read from its temporary folder."""

    root: Path
    hashes: dict[str, str]
    listed: dict[str, str]
    loaded: Loaded
    manifests: list[tuple[Path, RunManifest]]
    machines: list[MachineRecord]  # the kept sysinfo records
    bid: dict[str, Any]
    declared: dict[str, Any] | None
    doctors: list[str] = field(default_factory=list)  # what each doctor --active record says


def open_package(path: Path, dest: Path, limits: archive.Limits = archive.DEFAULT_LIMITS) -> Opened:
    """Extract and read a package into ``dest`` (an empty folder the caller removes)."""
    hashes = archive.extract(Path(path), dest, limits)
    listed = archive.read_manifest(dest, hashes, Path(path))
    run = dest / package.RUN
    # every file read: a digest in a package would be figures no result file holds
    loaded = load_dir(run, digests=False) if run.is_dir() else Loaded(root=run)
    manifests = manifest.run_manifests(run) if run.is_dir() else []
    machines = [m for p, _ in manifests if (m := manifest.kept_machine(p)) is not None]
    bid = package.checked_bid(_json(dest / package.BID), Path(path))
    declared = None
    if (dest / package.DECLARED).is_file():
        declared = package.read_declared(dest / package.DECLARED)
    opened = Opened(dest, hashes, listed, loaded, manifests, machines, bid, declared)
    opened.doctors = doctor_records(run) if run.is_dir() else []
    return opened


def doctor_records(run: Path) -> list[str]:
    """One line per `jobs --doctor` record of the run folder (milarun.doctor.active.record
    reads it, every field checked), or the line that says there is none."""
    from milarun.doctor.active import record

    lines = []
    for path in sorted(run.rglob(f"{results.DOCTOR_RECORD}*.json"))[:100]:
        try:
            data = record.read(path)
        except InputError as err:
            lines.append(f"doctor record unreadable: {str(err)[:200]}")
            continue
        lines.append(
            f"doctor --active {data['level'][:20]} on {data['node'][:60]}: {data['verdict']} "
            f"({path.name})"
        )
    return lines or ["no doctor --active record in the run folder (`jobs --doctor quick`)"]


def _json(path: Path) -> dict[str, Any]:
    try:
        data = results.read_json(path) if path.is_file() else {}
    except InputError:
        return {}
    return data if isinstance(data, dict) else {}


def expected_tests(tender: rules.Tender, devices: list[str]) -> set[str]:
    """The result names the tender's tests make on these devices (scaling.k: k = 1..N)."""
    found = set()
    for test, job in tender.jobs.items():
        if job.partition == "gpu-progression":
            found |= {f"{test}.{k}" for k in range(1, len(devices) + 1)}
        else:
            found.add(test)
    return found


def rederive(
    tender: rules.Tender, loaded: Loaded, devices: list[str]
) -> tuple[Loaded, dict[str, dict[str, Any]], build.Report, list[str]]:
    """The tender's tests' results, their summary and report (scored with the tender's
    weights), and the tests run that the tender does not name."""
    jobs = tender.jobs
    names = [view.name for view in loaded.results]
    keep = [i for i, name in enumerate(names) if checks.base_test(name, jobs)]
    extra = sorted(set(names) - {names[i] for i in keep})
    ours = Loaded(
        loaded.root,
        [loaded.results[i] for i in keep],
        [loaded.paths[i] for i in keep],
        loaded.skipped,
    )
    summ = summary.summarize(ours.results)
    expected = expected_tests(tender, devices)
    weights = {t: w for t, w in tender.weights.items() if t in expected}
    # the table, the score and its interval: from the summary (no charts, no run details)
    report = build.build_report(summ, title="bid", weights=(tender.weights_name, weights))
    return ours, summ, report, extra


@dataclass
class Verification:
    package: str
    tender: str
    checks: list[checks.Ruling]
    score: float | None
    score_ci: tuple[float, float] | None
    failure_rate: float
    tests: dict[str, dict[str, Any]]
    verdicts: list[acceptance.Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    margin: float = 0.95
    risk: float = 0.05
    coverage: float | None = None  # scored weight / the tender's weight of the tests run
    no_interval: str | None = None  # why the score has none (report.Report.no_interval)

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def acceptance(self) -> str | None:
        return acceptance.overall(self.verdicts) if self.verdicts else None

    @property
    def exit_code(self) -> int:
        if not self.passed:
            return RULE_FAILED
        return {acceptance.REJECT: REJECTED, acceptance.INCONCLUSIVE: INCONCLUSIVE}.get(
            self.acceptance or "", 0
        )


def verify(path: Path, tender_path: Path) -> Verification:
    """Check the package at ``path`` against the tender at ``tender_path``."""
    tender = rules.load_tender(tender_path)
    with tempfile.TemporaryDirectory(prefix="milarun-verify-") as tmp:
        return verify_opened(path, tender_path, tender, open_package(path, Path(tmp)))


def verify_opened(
    path: Path, tender_path: Path, tender: rules.Tender, opened: Opened
) -> Verification:
    """Check a package already opened (its folder still there: the evidence rule reads its
    files) against ``tender``, read from ``tender_path``."""
    bid = checks.Bid(
        tender,
        opened.root,
        opened.hashes,
        opened.listed,
        opened.loaded,
        {},
        manifests=opened.manifests,
        machines=opened.machines,
    )
    devices = checks.devices(bid)
    bid.loaded, bid.summary, report, bid.extra_tests = rederive(tender, opened.loaded, devices)
    found = [rule(bid) for rule in VERIFY_RULES]
    table = report.table
    tests = {
        str(t): {
            "n": int(row["n"]),
            "fail": int(row["fail"]),
            "perf": _finite(row["perf"]),
            "ci95": [_finite(row["ci_low"]), _finite(row["ci_high"])],  # the report's
            # the interval a declared rate is judged by, printed with its name
            **_interval(acceptance.rate_interval(_rates(bid.summary, str(t)), tender.rules.risk)),
        }
        for t, row in table.iterrows()
    }
    out = Verification(
        str(path),
        str(tender_path),
        found,
        report.score,
        report.score_ci,
        report.failure_rate,
        tests,
        notes=_notes(opened),
        margin=tender.rules.margin,
        risk=tender.rules.risk,
        coverage=report.coverage,
        no_interval=report.no_interval,
    )
    packed_for = opened.bid.get("tender_sha256")
    if packed_for and packed_for != tender.sha256:
        out.notes.append("the bid was packed for another tender file (its SHA-256 differs)")
    if opened.declared is not None:
        out.verdicts = judge(tender, opened.declared, bid.summary, report)
    return out


def _finite(value: Any) -> float | None:
    return float(value) if results.is_finite(value) else None


def _rates(summ: dict[str, dict[str, Any]], test: str) -> list[float]:
    return list((summ.get(test) or {}).get("rates") or [])


def _interval(found: acceptance.Interval | None) -> dict[str, Any]:
    if found is None:
        return {"interval": None, "interval_name": None}
    return {"interval": [found.low, found.high], "interval_name": found.name}


def judge(
    tender: rules.Tender,
    declared: dict[str, Any],
    summ: dict[str, dict[str, Any]],
    report: build.Report,
) -> list[acceptance.Verdict]:
    """The verdict on each declared figure."""
    margin, risk = tender.rules.margin, tender.rules.risk
    verdicts = [
        acceptance.judge_rate(test, _rates(summ, test), rate, margin, risk)
        for test, rate in sorted(declared["tests"].items())
    ]
    if declared.get("score") is not None:
        weights = report.test_weights or {}
        runs = {
            t: stats.RunSet(summ[t].get("rates") or [], int(summ[t].get("failures") or 0))
            for t in report.scored
        }
        if report.score is None:
            verdicts.append(
                acceptance.Verdict(
                    "score",
                    acceptance.REJECT,
                    None,
                    float(declared["score"]),
                    margin,
                    1.0,
                    0,
                    reason="no test was scored",
                )  # fmt: skip
            )
        else:
            verdicts.append(
                acceptance.judge_score(
                    runs, weights, report.score, float(declared["score"]), margin, risk
                )
            )
    return verdicts


def _notes(opened: Opened) -> list[str]:
    """The doctor records read here, then the packer's notes, each once: the packer's own
    word on doctor records is left out, as the buyer has read them (opened.doctors)."""
    packed = [str(n)[:300] for n in checks.as_list(opened.bid.get("notes"))]
    packed = [n for n in packed if not n.startswith("no doctor record")]
    return list(dict.fromkeys(opened.doctors + packed[:20]))


def _n(value: float | None) -> str:
    return fmt.plain(value)


def to_text(v: Verification) -> str:
    lines = [f"milarun verify {v.package} against {v.tender}"]
    width = max(len(c.rule) for c in v.checks)
    lines += [f"{'PASS' if c.ok else 'FAIL'}  {c.rule:<{width}}  {c.evidence}" for c in v.checks]
    lines.append("")
    ci = f" (95% CI {_n(v.score_ci[0])} - {_n(v.score_ci[1])})" if v.score_ci else ""
    ci = ci or (f" ({v.no_interval})" if v.no_interval else "")
    cover = f", coverage {v.coverage:.0%} of the weight" if v.coverage is not None else ""
    lines.append(f"score {_n(v.score)}{ci}{cover}; failure rate {v.failure_rate:.1%}")
    for test, row in v.tests.items():
        found = row.get("interval")
        interval = f" ({row['interval_name']} {_n(found[0])} - {_n(found[1])})" if found else ""
        lines.append(
            f"  {test}: {_n(row['perf'])}{interval}, {row['n']} run(s), {row['fail']} failed"
        )
    if v.notes:
        lines += ["", "notes:"] + [f"  - {n}" for n in v.notes]
    if v.verdicts:
        lines += ["", f"acceptance (margin {v.margin:g} x declared, risk {v.risk:g}):"]
        lines += [acceptance.verdict_line(d, _n) for d in v.verdicts]
    failed = [c.rule for c in v.checks if not c.ok]
    verdict = f"{len(failed)} rule(s) FAIL: {', '.join(failed)}" if failed else "every rule passes"
    if v.acceptance:
        verdict += f"; declared figures: {v.acceptance}"
    lines += ["", f"verdict: {verdict}"]
    return "\n".join(lines) + "\n"


def to_json(v: Verification) -> str:
    data = {
        "package": v.package,
        "tender": v.tender,
        "passed": v.passed,
        "checks": [asdict(c) for c in v.checks],
        "score": v.score,
        "score_ci": v.score_ci,
        "coverage": v.coverage,
        "failure_rate": v.failure_rate,
        "tests": v.tests,
        "acceptance": v.acceptance,
        "verdicts": [{**asdict(d), "threshold": d.threshold} for d in v.verdicts],
        "notes": v.notes,
        "exit_code": v.exit_code,
    }
    return json.dumps(data, indent=2) + "\n"
