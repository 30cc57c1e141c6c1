"""Bids with known numbers, for the tender tests and the tender scale benchmark.

A synthetic run folder is what `milarun jobs` leaves: results made by the harness's own
builder (resultfactory), a run manifest written and completed by the real ManifestWriter, and
the machine record and the profile as run kept beside it. Its results carry exactly the
quick profile's arguments, each instance its own student cgroup and CPUs.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from milarun.machine import sysinfo
from milarun.results import manifest, result_filename
from milarun.results.read import ResultView
from milarun.results.tender_rules import TenderRules
from milarun.run.profile import find_profile, load_profile
from milarun.tender import archive, rules
from resultfactory import rate_series, result, write

PROFILE = "quick"


def quick_argv(test: str) -> list[str]:
    return load_profile(PROFILE).jobs[test.split(".", 1)[1]].argv()


def synthetic_run(
    folder: Path,
    rates: dict[str, float],
    *,
    devices: int = 2,
    repeat: int = 3,
    noise: float = 0.02,
    watts: float | None = None,
    seed: int = 0,
    complete: bool = True,
    node_watts: float | None = None,
) -> Path:
    """A run folder of ``repeat`` runs of each test on ``devices`` CPU slices; each run's
    steady rate is the test's rate x (1 + noise x N(0, 1)); ``watts``: each instance's
    measured GPU power (an energy record), else none; ``node_watts``: the whole node's power
    from a BMC (a node_energy record, the instances sharing it), else none."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    labels = [f"cpu:{d}" for d in range(devices)]
    instances = [
        (t, f"{r}.{d}") for r in range(repeat) for t in sorted(rates) for d in range(devices)
    ]
    record = manifest.ManifestWriter.start(
        folder, PROFILE, sorted(rates), repeat, labels, instances
    )
    record.keep_machine()
    record.keep("profile", find_profile(PROFILE).read_text(encoding="utf-8"))
    version = sysinfo.milarun_version()
    for i, (test, job_id) in enumerate(instances):
        device = int(job_id.split(".")[1])
        steady = rates[test] * (1 + noise * rng.gauss(0, 1))
        extra: dict[str, Any] = {
            "call": {"function": "x:main", "argv": quick_argv(test), "arguments": None},
            "isolation": {
                "cgroups": {"cpuset": f"/student{device}", "memory": f"/student{device}"},
                "cpus": [device],
                "memory_limit": 2**30,
            },
            "milarun_version": version,
        }
        if watts is not None:
            extra["energy"] = {
                "watts": watts,
                "joules_per_example": watts / steady,
                "examples_per_joule": steady / watts,
                "method": "counter",
            }
        if node_watts is not None:
            extra["node_energy"] = node_energy(node_watts, steady, devices)
        data = result(
            test, job_id, None, rates=rate_series(steady), device=f"cpu:{device}", **extra
        )
        # it ran while the run did (the evidence rule reads the manifest's times)
        data["timings"]["train"]["start"] = data["finished_at"] = record.manifest.started_at
        stamp = f"20260101-000000-{i:06d}"
        path = write(folder, data, result_filename(test, job_id, True, stamp))
        write_log(folder, data, path)
        # as instance_ended records it, saved once at the end (10,000 rewrites would be slow)
        record.manifest.ended.append(manifest.EndedInstance(test, job_id, True, path.name))
    if complete:
        record.finish("complete")
    else:
        record.finish("interrupted", "SIGTERM")
    return folder


def node_energy(node_watts: float, rate: float, instances: int) -> dict[str, Any]:
    """A result's node_energy as measure.nodepower writes it: a BMC's counter over the 9 s
    steady window of a made rate series (18 slices of 0.5 s), the node shared by
    ``instances``."""
    seconds = 9.0
    share = node_watts * seconds / instances
    return {
        "joules": node_watts * seconds, "seconds": seconds, "watts": node_watts,
        "instances": instances, "share_joules": share, "gpu_joules": None,
        "rest_joules": None, "examples": rate * seconds,
        "examples_per_joule": rate * seconds / share, "method": "counter", "readings": 36,
        "source": "redfish /redfish/v1/Chassis/1 EnvironmentMetrics", "reason": None,
    }  # fmt: skip


def write_log(folder: Path, data: dict[str, Any], path: Path) -> Path:
    """The instance's console log as `jobs` keeps it (logs/<name>.J<id>.log): its command, a
    progress line every second slice and one at its end (measure.runner.progress_printer),
    the rate it said and its result file, each figure the result's own."""
    timer = data["timings"]["train"]
    rates, width = timer["rates"], timer["slice"]
    warmup = timer["count"] - math.fsum(r * width for r in rates)  # before the first slice

    def progress(slices: int, count: float, in_block: float, finished: bool) -> str:
        info = {"timer": "train", "count": count, "max_count": None, "slices": slices,
                "min_slices": None, "rate": rates[slices - 1], "in_block": in_block,
                "finished": finished}  # fmt: skip
        return f"MILARUN_PROGRESS {json.dumps(info)}"

    lines = [f"$ milarun run {data['call']['function']} --experiment-name {data['name']}"]
    lines += [
        progress(
            s,
            warmup + math.fsum(r * width for r in rates[:s]),
            timer["warmup_time"] + s * width,
            False,
        )
        for s in range(2, len(rates), 2)
    ]
    lines.append(progress(len(rates), timer["count"], timer["in_block"], True))
    rate = ResultView.from_dict(data).rate() or 0.0
    lines += [f"{data['name']} J{data['job_id']}: {rate:,.2f} examples/s", f"result: {path}"]
    log = folder / "logs" / f"{data['name']}.J{data['job_id']}.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text("\n".join(lines) + "\n")
    return log


def tender(path: Path, tests: list[str], **options: Any) -> Path:
    """A tender of the quick profile's ``tests`` (their short names)."""
    data = rules.make_tender(PROFILE, PROFILE, TenderRules(**options), names=tests)
    return rules.write_tender(path, data)


def unpack(package: Path, folder: Path) -> Path:
    """Our own package, trusted: extracted with the standard library."""
    with tarfile.open(package) as tar:
        tar.extractall(folder, filter="data")
    return folder


def repack(folder: Path, out: Path, manifest_too: bool = True) -> Path:
    """A package of ``folder`` (an unpacked one, edited); with ``manifest_too`` the MANIFEST
    is made anew (a vendor who edits and re-hashes), else the old one is kept."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != archive.MANIFEST)
    members: list[tuple[str, Path | bytes]] = [(p.relative_to(folder).as_posix(), p) for p in files]
    if manifest_too:
        archive.write_package(out, members)
        return out
    old = (folder / archive.MANIFEST).read_bytes()
    with tarfile.open(out, "w:gz") as tar:
        for name, path in members:
            tar.add(path, name)
        info = tarfile.TarInfo(archive.MANIFEST)
        info.size = len(old)
        import io

        tar.addfile(info, io.BytesIO(old))
    return out


def edited(package: Path, work: Path, edit: Callable[[Path], None], **kw: Any) -> Path:
    """The package with ``edit`` applied to its unpacked folder, packed again."""
    folder = unpack(package, work / "unpacked")
    edit(folder)
    out = repack(folder, work / "edited.tar.gz", **kw)
    shutil.rmtree(folder)
    return out


def edit_results(
    folder: Path, change: Callable[[dict[str, Any]], None], first_only: bool = True
) -> None:
    """Apply ``change`` to the result files of an unpacked package (the first, or all)."""
    for path in sorted((folder / "run").glob("*.json")):
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
        if first_only:
            return
