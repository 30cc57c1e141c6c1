"""`doctor --active`'s verdicts: what the probe children measured and the device backend
(NVML, AMD SMI) read, as Checks.

One line per measurement and device: its figure with a 95% CI, its share of the datasheet
figure where there is one, its ratio to its siblings (milarun.doctor.active.verdicts), and the
worst of those verdicts. A probe that crashed, hung or raised is a FAIL naming the phase it
was in: a device that cannot be measured is never a pass.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

from milarun.doctor.active import busy
from milarun.doctor.active.load_watch import BAD_REASONS, REASONS, WARN_REASONS
from milarun.doctor.active.verdicts import (
    CLOCK_SHARE,
    GEMM_SHARE,
    MEMORY_SHARE,
    PCIE_SHARE,
    Figure,
    gemm_peak,
    memory_peak,
    pcie_gbps,
    share_status,
    sibling,
)
from milarun.doctor.check import FAIL, INFO, PASS, WARN, Check, worst
from milarun.machine.gpu import Backend, Tools
from milarun.report.render.format import plain

GEMM_PHASES = ("gemm_bf16", "gemm_fp16", "gemm_tf32", "gemm_fp8")


@dataclass
class Probed:
    """One probe child (a GPU, a CPU slice, or the node's GPUs together) and what the
    device backend read around it."""

    label: str  # cuda:0, cpu:1, node
    kind: str  # gpu, cpu, node
    data: dict[str, Any] | None  # the child's output file (None: it wrote none)
    returncode: int | None
    timed_out: bool = False
    stderr: str = ""
    seconds: float = 0.0
    timeout: float = 0.0
    name: str | None = None  # the backend's name of the GPU
    memory: int | None = None  # the backend's total memory, bytes
    before: dict[str, Any] | None = None  # the backend's counters
    after: dict[str, Any] | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)  # its load_sample
    xids: list[int] = field(default_factory=list)
    xid_error: str | None = None  # why the backend gives no XID events here
    link: dict[str, Any] | None = None  # the backend's link
    planned_cpus: list[int] | None = None  # CPU slices: the plan's CPUs
    placement: str | None = None  # CPU slices: the student groups, or "pinned"
    library: str = "NVML"  # the backend that read the GPU, as messages name it
    tools: Tools = Backend.tools  # its vendor's commands, for the fixes (plain: both)
    pid: int | None = None  # the child's process id
    others: float | None = None  # GPUs: others' share of the probes' CPUs (None: not measured)

    def phase(self, name: str) -> dict[str, Any] | None:
        return ((self.data or {}).get("phases") or {}).get(name)

    @property
    def gpu_id(self) -> str:
        """The GPU's id in its vendor's commands (cuda:0 -> 0)."""
        return self.label.partition(":")[2] or "N"

    def command(self, what: str) -> str:
        """One of the vendor's commands (Tools' field ``what``) for this GPU."""
        return str(getattr(self.tools, what)).format(i=self.gpu_id)

    def reset(self) -> str:
        return (
            f"reset the GPU ({self.command('reset')}) or reboot; if it comes back, have it replaced"
        )


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def probe_check(p: Probed) -> Check | None:
    """A FAIL when the child did not finish its measurements, else None."""
    where = (p.data or {}).get("phase")
    during = f" during {where}" if where else ""
    if p.timed_out:
        detail = f"the probe did not finish in {p.timeout:.0f} s{during} (killed): a hung device?"
    elif p.returncode is not None and p.returncode < 0:
        try:
            sig = signal.Signals(-p.returncode).name
        except ValueError:
            sig = f"signal {-p.returncode}"
        detail = f"the probe was killed by {sig}{during}"
    elif p.returncode:
        detail = f"the probe exited with {p.returncode}{during}"
    elif not p.data or not p.data.get("done"):
        detail = "the probe wrote no complete record"
    else:
        return None
    tail = _tail(p.stderr)
    return Check(
        f"{p.label} probe",
        FAIL,
        detail + (f": {tail}" if tail else ""),
        f"run {p.command('query')} and read the kernel log ({p.command('kernel_log')}) for "
        f"this device; {p.reset()}"
        if p.kind == "gpu"
        else "read the error above; run `milarun doctor --active quick` again",
    )


def metric(
    p: Probed,
    title: str,
    found: dict[str, Any] | None,
    siblings: dict[str, list[float]],
    kind_word: str,
    datasheet: tuple[str, str, float, dict[str, float]] | None = None,
) -> Check | None:
    """The line of one measurement: figure, datasheet share, sibling ratio, worst verdict."""
    name = f"{p.label} {title}"
    if found is None:
        return None  # never reached: probe_check says why
    if "skipped" in found:
        return Check(name, INFO, f"skipped: {found['skipped']}")
    if "error" in found:
        return Check(name, FAIL, f"failed: {found['error']}", "see the error; " + _fix(p))
    samples = [float(x) for x in found.get("samples") or []]
    if not samples:
        return Check(name, FAIL, "no sample measured", _fix(p))
    unit = str(found.get("unit", ""))
    figure = Figure.of(samples)
    parts, statuses, fixes = [figure.text(unit)], [PASS], []
    if figure.mean <= 0:
        statuses.append(FAIL)
    if datasheet is not None:
        row, what, peak, thresholds = datasheet
        share = figure.mean / peak
        status = share_status(share, thresholds)
        statuses.append(status)
        parts.append(f"{share:.0%} of the {row} datasheet's {plain(peak, 4)} {unit}{what}")
        if status != PASS:
            fixes.append(_fix(p))
    judged = sibling(p.label, siblings)
    if judged is not None:
        statuses.append(judged.status)
        parts.append(judged.text(kind_word))
        if judged.status != PASS:
            fixes.append(
                f"{p.label} is slower than its siblings measured at the same time: " + _fix(p)
            )
    status = worst(statuses)
    return Check(name, status, "; ".join(parts), fixes[0] if fixes else None)


def _fix(p: Probed) -> str:
    if p.kind == "cpu":
        return (
            "look for a process pinned to this slice's CPUs (`top`, `ps -eo pid,psr,comm`), "
            "a slower socket or a misplaced cgroup (`milarun cgroups check`)"
        )
    return (
        f"check its clocks and throttle reasons ({p.command('performance')}), its cooling "
        f"and power; {p.reset()}"
    )


def samples_of(units: list[Probed], phase: str, key: str | None = None) -> dict[str, list[float]]:
    """Per unit, the samples it measured of ``phase`` (of its ``key`` part: host_link's h2d
    or d2h): what each unit is judged against its siblings on."""
    found = {}
    for p in units:
        data = p.phase(phase) or {}
        data = data.get(key) or {} if key else data
        if data.get("samples"):
            found[p.label] = [float(x) for x in data["samples"]]
    return found


def gpu_checks(units: list[Probed]) -> list[Check]:
    """Every GPU's measurement lines, each GPU against the others of its model (a node
    mixing models compares like with like)."""
    checks: list[Check] = []
    for p in units:
        siblings = [u for u in units if u.name == p.name]
        failed = probe_check(p)
        if failed:
            checks.append(failed)
        measured: list[Check] = []
        for phase in GEMM_PHASES:
            precision = phase.partition("_")[2]
            peak = gemm_peak(p.name, precision)
            sheet = (peak[0], " dense", peak[1], GEMM_SHARE) if peak else None
            title = f"gemm {precision}"
            measured += line_of(p, phase, title, samples_of(siblings, phase), "GPU", sheet)
        mem = memory_peak(p.name, p.memory)
        sheet = (mem[0], "", mem[1], MEMORY_SHARE) if mem else None
        measured += line_of(
            p,
            "memory_bandwidth",
            "memory copy",
            samples_of(siblings, "memory_bandwidth"),
            "GPU",
            sheet,
        )
        measured += _host_link(p, siblings)
        others = busy.gpu_others(p.samples, p.pid)
        took = busy.gpu_took(p.others, others)  # a busy machine: figures shown, not judged
        checks += [busy.not_verdict_grade(c, took) for c in measured]
        checks.append(busy.gpu_load(p.label, p.others, others, p.library, p.command("processes")))
        checks += _pattern(p)
        checks += [c for c in (clocks_check(p), counters_check(p)) if c]
    return checks


def line_of(
    p: Probed,
    phase: str,
    title: str,
    siblings: dict[str, list[float]],
    kind_word: str,
    sheet: tuple[str, str, float, dict[str, float]] | None = None,
) -> list[Check]:
    """:func:`metric`'s line for the phase of that name, as a list (empty: no line)."""
    found = metric(p, title, p.phase(phase), siblings, kind_word, sheet)
    return [found] if found else []


def _host_link(p: Probed, units: list[Probed]) -> list[Check]:
    link = p.phase("host_link")
    if link is None:
        return []
    if "skipped" in link or "error" in link:
        return line_of(p, "host_link", "host link", {}, "GPU")
    trained = [
        (s["pcie_gen"], s["pcie_width"])
        for s in p.samples
        if s.get("pcie_gen") and s.get("pcie_width")
    ]
    gen, width = max(trained) if trained else (None, None)
    max_gen, max_width = (p.link or {}).get("max_gen"), (p.link or {}).get("max_width")
    top = pcie_gbps(max_gen, max_width)
    out = []
    for way, title in (("h2d", "host->device"), ("d2h", "device->host")):
        sheet = (
            (f"PCIe gen{max_gen} x{max_width}", " per direction", top, PCIE_SHARE) if top else None
        )
        found = metric(p, title, link.get(way), samples_of(units, "host_link", way), "GPU", sheet)
        if found is None:
            continue
        if gen and max_gen and max_width and (gen < max_gen or width < max_width):
            found = Check(
                found.name,
                worst([found.status, WARN]),
                found.detail + f"; the link trained at gen{gen} x{width} under load "
                f"(it can do gen{max_gen} x{max_width})",
                "reseat the GPU or its riser, check the slot's BIOS setting and "
                "`sudo lspci -vv` (LnkSta against LnkCap)",
            )
        elif found.status != PASS and found.fix == _fix(p):
            found = Check(
                found.name,
                found.status,
                found.detail,
                "check the slot and "
                "riser, the BIOS PCIe setting, IOMMU/ACS settings (`sudo lspci -vv`)",
            )
        out.append(found)
    return out


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _pattern(p: Probed) -> list[Check]:
    found = p.phase("pattern")
    if found is None or "error" in found or "skipped" in found:
        return line_of(p, "pattern", "memory test", {}, "GPU") if found else []
    tested, errors = int(found.get("bytes", 0)), int(found.get("errors", 0))
    share = f" ({tested / p.memory:.0%} of its memory)" if p.memory else ""
    detail = (
        f"{errors} word(s) read back wrong over {_size(tested)}{share}, "
        f"{found.get('passes')} pattern passes in {float(found.get('seconds', 0)):.1f} s"
    )
    if errors:
        return [Check(f"{p.label} memory test", FAIL, detail, p.reset())]
    if not tested:
        return [
            Check(
                f"{p.label} memory test",
                FAIL,
                detail + ": no memory could be allocated",
                f"free the GPU ({p.command('processes')} lists its processes) and run again",
            )
        ]
    return [Check(f"{p.label} memory test", PASS, detail)]


def clocks_check(p: Probed) -> Check | None:
    """SM clock and clock event reasons while the GPU was busy (utilisation >= 50%)."""
    loaded = [s for s in p.samples if (s.get("utilization") or 0) >= 50]
    name = f"{p.label} clocks"
    if not loaded:
        if not p.samples:
            return None
        return Check(
            name, INFO, f"no {p.library} sample caught the GPU busy ({len(p.samples)} taken)"
        )
    clocks = sorted(s["sm_clock"] for s in loaded if s.get("sm_clock"))
    reasons = 0
    for s in loaded:
        reasons |= s.get("reasons") or 0
    said = [text for bit, text in REASONS.items() if reasons & bit and bit != 0x1]
    top = (p.link or {}).get("max_sm_clock")
    hot = max((s.get("temperature") or 0) for s in loaded)
    power = max((s.get("power_w") or 0) for s in loaded)
    detail = f"{len(loaded)} samples under load"
    status = PASS
    if clocks:
        median = clocks[len(clocks) // 2]
        detail += f": SM clock median {median} MHz" + (f" of {top} MHz max" if top else "")
        if top and median < CLOCK_SHARE * top:
            status = WARN
    detail += f", up to {hot} C, {power:.0f} W; reasons: {', '.join(said) or 'none'}"
    if reasons & BAD_REASONS:
        status = FAIL
    elif reasons & WARN_REASONS:
        status = worst([status, WARN])
    fix = (
        "the GPU slows itself down: check its cooling (fans, airflow, inlet temperature) "
        f"and power delivery ({p.command('performance')})"
        if status != PASS
        else None
    )
    return Check(name, status, detail, fix)


def counters_check(p: Probed) -> Check | None:
    """ECC errors, remapped rows, retired pages and XID events: before and after the load."""
    if p.before is None or p.after is None:
        return None
    bad: list[str] = []
    warn: list[str] = []
    seen: list[str] = []
    for key in ("ecc_uncorrected", "ecc_corrected", "remapped_uncorrectable"):
        a, b = p.before.get(key), p.after.get(key)
        if a is None or b is None:
            continue
        seen.append(f"{key.replace('_', ' ')} {a}->{b}")
        if b > a:
            (warn if key == "ecc_corrected" else bad).append(f"{b - a} new {key.replace('_', ' ')}")
    for cause, after in (p.after.get("retired_pages") or {}).items():
        before = (p.before.get("retired_pages") or {}).get(cause)
        if after is not None and before is not None:
            seen.append(f"retired pages ({cause.replace('_', '-')}) {before}->{after}")
            if after > before:
                bad.append(f"{after - before} page(s) retired ({cause.replace('_', '-')})")
    if p.after.get("remap_failure"):
        bad.append("a row remapping failed")
    elif p.after.get("remap_pending"):
        warn.append("a row remapping is pending (applied at the next GPU reset)")
    if p.xids:
        bad.append(f"XID error(s) {', '.join(map(str, sorted(set(p.xids))))} during the checks")
    detail = "; ".join(bad + warn) or (
        ", ".join(seen) if seen else f"{p.library} gives no error counter"
    )
    detail += f"; {p.xid_error}" if p.xid_error else "; no XID event"
    status = FAIL if bad else WARN if warn else PASS if seen else INFO
    fix = p.reset() if bad or warn else None
    return Check(f"{p.label} errors", status, detail, fix)
