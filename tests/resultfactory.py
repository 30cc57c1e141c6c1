"""Result files with known numbers, for report tests and the report scale benchmark, and
whole run folders of them (``run_folder``: a manifest and the results) for the history tests.

Each result is made by the harness's own builder (results.records.ResultRecord), so it has
exactly the keys and shape `milarun run` writes (DESIGN section 5); the rate series are
chosen so that the steady rate (mean of ``rates[-20:-2]``) is exactly the value asked for.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

from milarun.results import manifest
from milarun.results.records import Call, Failure, Isolation, RateRecord, ResultRecord, TimerRecord

SYSTEM = {
    "hostname": "node1",
    "os": "Linux",
    "cpu": {"model": "Test CPU", "count": 16},
    "ram_gb": 64.0,
    "python": "3.11",
    "torch": "2.5.0",
    "cuda": "12.4",
    "driver": "550.1",
    "gpus": ["NVIDIA A100-SXM4-80GB"] * 8,
}


def rate_series(
    steady: float,
    slices: int = 24,
    noise: float = 0.0,
    warmup: int = 2,
    rng: random.Random | None = None,
) -> list[float]:
    """A rate series whose steady window (``rates[-20:-2]``) averages exactly ``steady``.

    The first ``warmup`` slices are slower (they fall outside the window as long as
    ``slices >= 20 + warmup``); noise is added in +/- pairs so the window mean is exact.
    """
    rng = rng or random.Random(0)
    window = [steady] * 18
    for i in range(0, 18 - 1, 2):
        delta = steady * noise * rng.uniform(-1, 1)
        window[i] += delta
        window[i + 1] -= delta
    head = [steady * (0.3 + 0.7 * i / max(warmup, 1)) for i in range(warmup)]
    middle = [steady] * max(slices - warmup - 20, 0)
    return head + middle + window + [steady, steady]


WARMUP_EXAMPLES = 64  # the one warm-up block of every made series


def rate_record(rates: list[float], slice_duration: float = 0.5) -> RateRecord:
    """A train timer as the rate log writes it: one warm-up block of 64 examples, then one
    block per slice; its count and in-block time agree with its rates, as a real log's do
    (milarun.tender.consistency checks that)."""
    warmup_time = 0.01
    examples = sum(rates) * slice_duration  # NaN or inf for the series made to be absurd
    in_block = len(rates) * slice_duration + warmup_time
    return RateRecord(
        start=0.0,
        duration=in_block,
        in_block=in_block,
        count=WARMUP_EXAMPLES + (round(examples) if math.isfinite(examples) else 0),
        max_count=None,
        blocks=len(rates) + 1,
        syncs=len(rates) + 1,
        slice=slice_duration,
        last_slice=None,
        rates=tuple(rates),
        warmup_blocks=1,
        warmup_time=warmup_time,
    )


def result(
    name: str,
    job_id: str,
    steady: float | None,
    *,
    device: str = "cpu:0",
    failure: dict[str, str] | None = None,
    metrics: dict[str, Any] | None = None,
    rates: list[float] | None = None,
    ranks: list[float] | None = None,
    program: float = 30.0,
    node: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One result dict; ``steady=None`` with a failure makes a failed run; ``node``: the
    result's ``node`` and host name (default node1). ``extra`` keys replace the record's."""
    timings: dict[str, Any] = {"program": TimerRecord(None, program, 1)}
    if ranks is not None:
        for rank, value in enumerate(ranks):
            timings[f"train_{rank}"] = rate_record(rate_series(value))
    elif steady is not None or rates is not None:
        timings["train"] = rate_record(rates if rates is not None else rate_series(steady))
    host = node or "node1"
    record = ResultRecord(
        name=name,
        job_id=job_id,
        dataroot="/data",
        outdir="/results",
        call=Call("milabench.models.x:main", [], {}),
        failure=Failure(failure["kind"], failure["message"]) if failure else None,
        error=(failure or {}).get("message"),
        device=device,
        devices=[device],
        gpu=None,
        device_count=0 if device.startswith("cpu") else 1,
        environ={},
        isolation=Isolation(
            cgroups={"cpuset": f"/student{device[-1]}", "memory": f"/student{device[-1]}"},
            cpus=(0, 1),
            memory_limit=8 * 2**30,
            torch_threads=2,
        ),
        returncode=0 if failure is None else 1,
        metrics=metrics or {"loss": 0.5},
        timings=timings,
        gpu_monitor={"samples": []},
        cpu_monitor={"samples": []},
        node=host,
        slurm=None,
        system=SYSTEM,
        hostname=host,
        milarun_version="0.1.0",
        finished_at=1767225600.0,
    )
    data = record.to_dict()
    data.update(extra)
    return data


def write(folder: Path, data: dict[str, Any], filename: str | None = None) -> Path:
    """Write a result under a DESIGN-style name (or the given one)."""
    folder.mkdir(parents=True, exist_ok=True)
    fail = "" if data["success"] else ".FAIL"
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in data["name"])
    filename = filename or f"{safe}.J{data['job_id']}{fail}.20260101-000000-000000.json"
    path = folder / filename
    path.write_text(json.dumps(data))
    return path


def run_folder(
    folder: Path,
    rates: dict[str, list[float]],
    started_at: float,
    *,
    node: str = "node1",
    gpus: dict[str, str] | None = None,
    **extra: Any,
) -> Path:
    """A jobs run's folder: its manifest (started at ``started_at``) and one result per test
    and device (``rates``: test -> one steady rate per device, NaN: a failed instance);
    ``gpus``: device -> GPU UUID."""
    folder.mkdir(parents=True, exist_ok=True)
    started = manifest.ManifestWriter.start(folder, "quick", sorted(rates), 1, ["cpu:0"])
    started.manifest.started_at = started_at
    started.finish("complete")
    for test, values in rates.items():
        for index, value in enumerate(values):
            device = f"cuda:{index}" if gpus else f"cpu:{index}"
            uuid = (gpus or {}).get(device)
            failed = value != value
            data = result(
                test,
                f"0.{index}",
                None if failed else value,
                rates=None if failed else rate_series(value, noise=0.01),
                failure={"kind": "crash", "message": "died"} if failed else None,
                device=device,
                node=node,
                finished_at=started_at + 60,
                gpu_identity=[{"id": str(index), "uuid": uuid, "pci_bus_id": None, "note": None}]
                if uuid
                else None,
                **extra,
            )
            write(folder, data)
    return folder
