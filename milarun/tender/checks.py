"""The rules ``milarun verify`` checks on an extracted bid package, one function each (those
on how the runs were measured: milarun.tender.measured_rules), and their order (RULES).

Each rule gets the package as read (``Bid``, milarun.tender.rule) and returns a ``Ruling``:
its name, PASS or FAIL, and the evidence in one line. Figures are re-derived from the raw
slices by the report's own code (results.read, the steady window, report.summary); nothing
from the package is run.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable

from milarun.report.summary_entry import entries
from milarun.results import manifest, read
from milarun.tender import archive, rules
from milarun.tender.latency_rules import latency
from milarun.tender.measured_rules import busy, comparability, consistency, steady, throttle
from milarun.tender.package import PROFILE, WEIGHTS
from milarun.tender.rule import MAX_SHOWN, Bid, Ruling, as_dict, as_list, base_test
from milarun.tender.rule import some as _some

__all__ = ["MAX_SHOWN", "RULES", "Bid", "Ruling", "as_dict", "as_list", "base_test", "devices"]


def hashes(bid: Bid) -> Ruling:
    changed = sorted(n for n, h in bid.listed.items() if bid.hashes.get(n) != h)
    unlisted = sorted(set(bid.hashes) - set(bid.listed) - {archive.MANIFEST})
    if not changed and not unlisted:
        return Ruling("hashes", True, f"{len(bid.listed)} files match their SHA-256 in MANIFEST")
    parts = [f"{len(changed)} changed after packing ({_some(changed)})"] if changed else []
    parts += [f"{len(unlisted)} not in the MANIFEST ({_some(unlisted)})"] if unlisted else []
    return Ruling("hashes", False, "; ".join(parts))


def version(bid: Bid) -> Ruling:
    """Every result ran the tender's milarun, and so does this verify: the FLOPs table and
    the bounds it applies are its release's. Another version FAILs; another commit of the
    same version (a source checkout) is said on the line, the verdict left to the buyer."""
    found = Counter(str(v.milarun_version) for v in bid.views)
    other = {v: n for v, n in found.items() if v != bid.tender.version}
    if other:
        shown = ", ".join(f"{n} on {v}" for v, n in sorted(other.items()))
        return Ruling("version", False, f"the tender asks for {bid.tender.version}: {shown}")
    mine = rules.release()
    if mine["version"] != bid.tender.version:
        return Ruling(
            "version",
            False,
            f"the tender names milarun {bid.tender.version} but this verify runs milarun "
            f"{mine['version']}: its FLOPs and bounds are another release's; verify with "
            f"milarun {bid.tender.version}",
        )
    said = f"every result ran milarun {bid.tender.version}"
    commit, modified = bid.tender.release
    if commit is None:
        return Ruling("version", True, said)
    note = _commit_note(commit, modified, mine["commit"], mine["modified"])
    return Ruling("version", True, f"{said}; {note}" if note else said)


def _commit_note(
    commit: str, modified: bool | None, mine: str | None, mine_modified: bool | None
) -> str | None:
    """What the line says of the tender's commit against this verify's, or None (same)."""
    if mine is None:
        return f"note: the tender names commit {commit[:12]}, this verify's is not known"
    if mine != commit:
        return (
            f"note: the tender names commit {commit[:12]}, this verify runs {mine[:12]} "
            "(same version: its FLOPs table and bounds may differ)"
        )
    if modified or mine_modified:
        return f"note: commit {commit[:12]} with modified files (the tender's or this verify's)"
    return None


def _file_sha(bid: Bid, name: str) -> str | None:
    return bid.hashes.get(name)


def profile(bid: Bid) -> Ruling:
    names = sorted({str(run.profile)[:100] for _, run in bid.manifests})
    sha = _file_sha(bid, PROFILE)
    wanted = bid.tender.profile_name
    if sha is None:
        return Ruling("profile", False, "the package holds no profile.json (the profile as run)")
    if sha != bid.tender.profile_sha256:
        return Ruling(
            "profile", False, f"profile.json differs from the tender's {wanted} (SHA-256)"
        )
    if names != [wanted]:
        return Ruling("profile", False, f"the runs name profile(s) {names}, the tender {wanted}")
    return Ruling("profile", True, f"the profile as run is the tender's {wanted} ({sha[:12]})")


def weights(bid: Bid) -> Ruling:
    sha = _file_sha(bid, WEIGHTS)
    name = bid.tender.weights_name
    if sha is None:
        return Ruling("weights", False, "the package holds no weights.json")
    if sha != bid.tender.weights_sha256:
        return Ruling("weights", False, f"weights.json differs from the tender's {name} (SHA-256)")
    return Ruling("weights", True, f"the weights are the tender's {name} ({sha[:12]})")


def devices(bid: Bid) -> list[str]:
    """The devices the runs used (their manifests'), else the results'."""
    found = {d[:100] for _, run in bid.manifests for d in run.devices}
    return sorted(found or {v.device for v in bid.views if v.device_key})


def tests(bid: Bid) -> Ruling:
    devs = devices(bid)
    gpus = max((len(m.system.gpus) for m in bid.machines), default=0)
    used = [d for d in devs if not d.startswith("cpu")]
    short = []
    if gpus and len(used) < gpus:
        short.append(f"ran on {len(used)} of the machine's {gpus} GPUs")
    counts = Counter((v.name, v.device) for v in bid.views)
    names = Counter(v.name for v in bid.views)
    need = bid.tender.rules.repeat
    for test, job in bid.tender.jobs.items():
        if job.partition == "gpu-progression":
            wanted = [(f"{test}.{k}", names[f"{test}.{k}"]) for k in range(1, len(devs) + 1)]
        elif job.partition == "per-gpu":
            wanted = [(f"{test} on {d}", counts[(test, d)]) for d in devs or ["?"]]
        else:
            wanted = [(test, names[test])]
        short += [f"{what}: {n} of {need} run(s)" for what, n in wanted if n < need]
    extra = f"; also ran {_some(bid.extra_tests)} (not in the tender)" if bid.extra_tests else ""
    if short:
        return Ruling("tests", False, _some(short) + extra)
    return Ruling(
        "tests",
        True,
        f"{len(bid.tender.jobs)} test(s) x {need} run(s) on {', '.join(devs) or '?'}{extra}",
    )


def _student(view: read.ResultView) -> str | None:
    """Why an instance was not confined to its own student group, or None."""
    iso = view.isolation
    groups = (iso.cgroups if iso is not None else None) or {}
    want = f"student{view.device.rpartition(':')[2]}"
    for controller in ("cpuset", "memory"):
        path = groups.get(controller)
        if not isinstance(path, str) or path.rstrip("/").rpartition("/")[2] != want:
            return f"{view.name} J{view.job_id}: {controller} {str(path)[:60]!r}"
    return None


def cgroups(bid: Bid) -> Ruling:
    jobs = bid.tender.jobs
    per_device = [
        v for v in bid.views if (t := base_test(v.name, jobs)) and jobs[t].partition == "per-gpu"
    ]
    # counted among all the results; those not run one per device named, and why
    apart = sorted({v.name for v in bid.views} - {v.name for v in per_device})
    skipped = len(bid.views) - len(per_device)
    uncounted = (
        f"; {skipped} not counted ({_some(apart)}: not run one per device, so no student group "
        "of their own)"
        if skipped
        else ""
    )
    loose = [why for v in per_device if (why := _student(v))]
    overlaps = []
    together: dict[tuple[str, str], list[read.ResultView]] = defaultdict(list)
    for v in per_device:  # the instances of one repeat of one test ran side by side
        together[(v.name, v.job_id.split(".")[0])].append(v)
    for (name, repeat), group in together.items():
        cpus = [set((iso.cpus if (iso := v.isolation) else None) or ()) for v in group]
        if sum(map(len, cpus)) != len(set().union(*cpus)):
            overlaps.append(f"{name} repeat {repeat}: instances share CPUs")
    confined = len(per_device) - len(loose)
    if not bid.tender.rules.require_cgroups:
        return Ruling(
            "cgroups",
            True,
            f"not required ({confined} of the {len(bid.views)} result(s) in their own student "
            f"cgroup{uncounted})",
        )
    if loose or overlaps:
        return Ruling(
            "cgroups", False, f"not in their own student cgroup: {_some(loose + overlaps)}"
        )
    return Ruling(
        "cgroups",
        True,
        f"{len(per_device)} of the {len(bid.views)} result(s), each in its own student cgroup"
        + uncounted,
    )


def arguments(bid: Bid) -> Ruling:
    jobs, other = bid.tender.jobs, []
    for v in bid.views:
        test = base_test(v.name, jobs)
        argv = v.call.argv if v.call is not None else None
        if test and (argv is None or argv != jobs[test].argv):
            words = " ".join(map(str, argv or ()))
            other.append(f"{v.name} J{v.job_id}: {words[:120]}")
    if bid.tender.rules.allow_overrides:
        return Ruling("arguments", True, f"overrides allowed ({len(other)} run(s) with other)")
    if other:
        return Ruling("arguments", False, f"{len(other)} run(s) not the profile's: {_some(other)}")
    return Ruling("arguments", True, "every run has exactly the profile's arguments")


def failures(bid: Bid) -> Ruling:
    typed = entries(bid.summary).values()
    runs = sum(e.n for e in typed)
    failed = sum(e.failures for e in typed)
    rate = failed / runs if runs else 1.0
    limit = bid.tender.rules.max_failure_rate
    kinds: Counter[str] = Counter()
    for entry in typed:
        kinds.update(entry.failure_kinds or {})
    detail = f" ({', '.join(f'{k}: {n}' for k, n in sorted(kinds.items()))})" if kinds else ""
    text = f"{failed} of {runs} run(s) failed ({rate:.1%}, limit {limit:.1%}){detail}"
    return Ruling("failures", runs > 0 and rate <= limit, text)


def complete(bid: Bid) -> Ruling:
    if not bid.manifests:
        return Ruling("complete", False, "no run manifest: not made by `milarun jobs`")
    cuts = manifest.cut_short(bid.root / "run")
    if cuts:
        return Ruling(
            "complete", False, _some([f"{c.describe()}: no result for {c.missing()}" for c in cuts])
        )
    return Ruling("complete", True, f"{len(bid.manifests)} run(s), each complete")


def machine_records(bid: Bid) -> Ruling:
    missing = [p.name for p, _ in bid.manifests if not manifest.machine_path(p).is_file()]
    if missing or not bid.manifests:
        return Ruling("records", False, f"no machine record (sysinfo) for run {_some(missing)}")
    hosts = sorted({str(m.system.hostname)[:100] for m in bid.machines})
    return Ruling("records", True, f"machine record of every run ({', '.join(hosts)})")


RULES: tuple[Callable[[Bid], Ruling], ...] = (
    hashes,
    version,
    profile,
    weights,
    tests,
    cgroups,
    arguments,
    failures,
    complete,
    steady,
    throttle,
    busy,
    consistency,
    comparability,
    latency,
    machine_records,
)
