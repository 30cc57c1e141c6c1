"""A hostile vendor's edits of an honest run folder, for the evidence tests and the fault
campaign (benchmarks/faults_forgery.py): one result's rates and count scaled, with as much
of the evidence beside it edited to match as the forger takes the trouble to.

Each edit rewrites files in place; the caller packs the folder again with a new MANIFEST
(bidkit.edited), as a vendor who edits and re-hashes would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from milarun.results.read import ResultView

PROGRESS = "MILARUN_PROGRESS "


def result_path(folder: Path, test: str) -> Path:
    """The one result file of ``test`` (``modern.llm``) in a run folder."""
    (path,) = [p for p in folder.glob(f"{test}.J*.json") if p.name.split(".J")[0] == test]
    return path


def log_path(folder: Path, result: Path) -> Path:
    name, _, rest = result.name.partition(".J")
    job_id = rest.rsplit(".", 2)[0]
    return folder / "logs" / f"{name}.J{job_id}.log"


def _rate_records(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in data["timings"].values() if isinstance(t, dict) and t.get("type") == "rate"]


def scale(
    folder: Path,
    test: str,
    factor: float,
    *,
    rates: bool = True,
    log: bool = False,
    derived: bool = False,
    energy: bool = False,
    flops: bool = False,
) -> Path:
    """Scale the count (and with ``rates`` the rates) of ``test``'s result by ``factor``;
    ``log``: its instance log's progress lines and said rate too; ``derived``: the FLOP/s
    made of the rate (efficiency); ``energy``: the energy record's examples and the figures
    made of them (its joules, from the monitor's samples, stay); ``flops``: the FLOPs of an
    example and of a step divided by ``factor`` (so that the FLOP/s made of the forged rate
    stay the true ones, under every peak). Returns the result's path."""
    path = result_path(folder, test)
    data = json.loads(path.read_text())
    for record in _rate_records(data):
        record["count"] *= factor
        if rates:
            record["rates"] = [r * factor for r in record["rates"]]
    if derived and data.get("efficiency"):
        eff = data["efficiency"]
        for key in ("achieved_flops", "percent_of_peak"):
            if eff.get(key) is not None:
                eff[key] *= factor
    if flops and data.get("efficiency"):
        eff = data["efficiency"]
        eff["flops_per_example"] /= factor
        eff["flops_per_step"] /= factor
        eff["flops_by_precision"] = {p: f / factor for p, f in eff["flops_by_precision"].items()}
    if energy and data.get("energy", {}).get("examples") is not None:
        found = data["energy"]
        found["examples"] *= factor
        found["examples_per_joule"] *= factor
        found["joules_per_example"] /= factor
    path.write_text(json.dumps(data))
    if log:
        scale_log(log_path(folder, path), factor, ResultView.from_dict(data).rate())
    return path


def scale_log(path: Path, factor: float, rate: float | None = None) -> None:
    """Every progress line's count and rate times ``factor``; the rate said at the end
    ``rate`` (the forged result's), else times ``factor``."""
    said = re.compile(r"^(.* J[^ ]+: )([0-9][0-9,]*\.[0-9]{2})( examples/s)$")
    lines = []
    for line in path.read_text().splitlines():
        if line.startswith(PROGRESS):
            info = json.loads(line[len(PROGRESS) :])
            info["count"] *= factor
            if info.get("rate") is not None:
                info["rate"] *= factor
            line = PROGRESS + json.dumps(info)
        elif match := said.match(line):
            value = rate if rate is not None else float(match[2].replace(",", "")) * factor
            line = f"{match[1]}{value:,.2f}{match[3]}"
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")


def edit_result(folder: Path, test: str, edit: Callable[[dict[str, Any]], object]) -> Path:
    """``edit`` applied to ``test``'s result in place (a field removed, a name changed)."""
    path = result_path(folder, test)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


def rename_gpu(data: dict[str, Any], name: str) -> None:
    """Every name a result gives its GPU (system record, efficiency) made ``name``."""
    for gpu in data["system"]["gpus"]:
        gpu["name"] = name
    data["efficiency"]["device_name"] = name
    data["gpu"] = name
    for gpu in (data["gpu_monitor"].get("inventory") or {}).values():
        gpu["name"] = name


def monitor_inventory(data: dict[str, Any], **fields: Any) -> None:
    """The GPU monitor's inventory, as a milarun since issue 46 records it: each sampled
    GPU as the system record says it is, with ``fields`` changed."""
    (gpu,) = data["system"]["gpus"]
    ids = {gid for sample in data["gpu_monitor"]["samples"] for gid in sample["gpus"]}
    data["gpu_monitor"]["inventory"] = {
        gid: {
            "name": gpu["name"],
            "uuid": gid,
            "memory_mb": gpu["memory_mb"],
            "pci_device_id": gpu.get("pci_device_id"),
            **fields,
        }
        for gid in ids
    }


def monitor_memory(data: dict[str, Any], mib: float) -> None:
    """The GPU monitor's memory size of every sample made ``mib``."""
    for sample in data["gpu_monitor"]["samples"]:
        for reading in sample["gpus"].values():
            reading["memory"] = [reading["memory"][0], mib]
