"""The fault campaign, a machine pushed past its limits (issue 40): `--devices cpu:99` on a
small machine, refused before anything starts; a results folder whose filesystem fills
mid-run, its finished results kept whole and the lost instances named. Run by faults.py
(root: the full-disk scenario mounts a tmpfs)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from faultkit import Outcome, clean, leftovers, milarun, one_line, profile, results_in

from fullfs import full_tmpfs
from milarun.results import load_result, manifest


def too_many_slices(tmp: Path) -> Outcome:
    """`--devices cpu:99` on a machine with fewer CPUs: refused in one line within 2 s,
    before anything starts (no folder, no process)."""
    cpus = len(os.sched_getaffinity(0))
    if cpus >= 99:
        return True, 0, f"skipped: {cpus} CPUs here"
    out = tmp / "out"
    began = time.monotonic()
    done = milarun(
        "jobs", profile(tmp, run={"experiment": "faulty:steps"}), "--devices", "cpu:99", "-o", out
    )
    seconds = time.monotonic() - began
    ok = one_line(done) and seconds < 2 and not out.exists() and not leftovers(str(out))
    return ok, 0, f"exit {done.returncode} in {seconds:.1f} s: {done.stderr.strip()[-100:]!r}"


def disk_fills_mid_run(tmp: Path) -> Outcome:
    """A job fills the results folder's filesystem: the results finished before stay whole,
    the run's manifest is completed and names each instance it could not record and why,
    and the report of the folder lists them with that reason."""
    if os.geteuid() != 0:
        return True, 0, "skipped: needs root to mount a tmpfs"
    prof = profile(
        tmp,
        a={"experiment": "faulty:steps"},
        fill={"experiment": "faulty:fills_disk"},
        b={"experiment": "faulty:steps"},
    )
    with full_tmpfs(tmp / "disk", size="2m", fill=False) as disk:
        out = disk / "out"
        run = milarun("jobs", prof, "--devices", "cpu:2", "-o", out)
        finished = [r for r in results_in(out) if r["name"] == "p.a"]
        whole = all(isinstance(load_result(p), dict) for p in out.glob("p.a.*.json"))
        runs = manifest.run_manifests(out)
        status = runs[0][1].status if runs else None
        cut = manifest.cut_short(out)
        report = milarun("report", out)
    lost = "p.fill (J0.0, J0.1), p.b (J0.0, J0.1)"
    said = " ".join(report.stdout.split())
    named = lost in said and "No space left on device" in said
    why = cut[0].describe() if cut else "nothing said"
    ok = clean(run) and len(finished) == 2 and whole and status == "complete" and named
    return (
        ok,
        0 if named else 4,
        f"exit {run.returncode}, {len(finished)} finished result(s) whole: {whole}, manifest "
        f"{status}: {why[-110:]!r}; the report names the 4 lost: {named}",
    )


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {
    "limits: --devices cpu:99": too_many_slices,
    "limits: disk fills mid-run": disk_fills_mid_run,
}
