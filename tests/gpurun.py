"""A run folder as `milarun jobs` leaves it on a machine's GPUs, each GPU measured through the
device interface over a fake of its vendor's library (tests put the fake where the library
would be: ``sys.modules["amdsmi"]`` or ``["pynvml"]``), for the tender and report tests.

Everything a GPU instance records is made by the code that makes it in `milarun run`: the
supervisor's device discovery and each instance's environment (machine.devices, gpuids),
its GPU monitor (machine.monitors, sampling every second as the runner does), its energy
and throttle records (measure.energy), its system record (machine.sysinfo), the manifest
and the machine record kept beside it. Only the training is not run: each instance's rate
series is bidkit's (the quick profile's arguments, a known steady rate, its console log
written from it), and the run happens in virtual time (a FakeClock as ``time.time``), so
that 24 slices of 0.5 s take no wall time and every figure is the same on any machine.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import bidkit
from fakes import FakeClock
from milarun.machine import devices, gpu, gpuids, monitors, sysinfo
from milarun.measure import diagnostics, energy
from milarun.results import manifest, records, result_filename, utc_stamp
from milarun.run.profile import find_profile
from resultfactory import rate_record, rate_series, write

INTERVAL = 1.0  # the runner's monitor interval (s)
SLICE = 0.5  # the rate log's slice (s of in-block time)
OVERHEAD = 0.004  # wall time between two slices outside the timed blocks (s)
# what a ROCm build of torch records in place of CUDA's
ROCM_TORCH = {"torch": "2.11.0+rocm6.4", "cuda": None, "cudnn": None, "hip": "6.4.43482"}


def gpu_run(
    folder: Path, rates: dict[str, float], *, repeat: int = 2, noise: float = 0.01, seed: int = 0
) -> Path:
    """A complete run folder of ``repeat`` runs of each test (quick.<name> -> steady rate)
    on every GPU the machine's device backend sees, the instances of a test side by side;
    the backend is found as `jobs` finds it (gpu.load), so the caller's fake answers."""
    folder.mkdir(parents=True, exist_ok=True)
    clock = FakeClock()
    slices = len(rate_series(1.0))
    run_time = INTERVAL + slices * (SLICE + OVERHEAD) + 2 * INTERVAL
    # the whole run lies in the past, as a real one handed to the buyer does
    clock.now = time.time() - len(rates) * repeat * run_time - 600
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", clock)
        for name in devices.VISIBLE_VARIABLES:  # every GPU of the machine, as `jobs` alone
            patch.delenv(name, raising=False)
        backend = gpu.load()
        devs = gpuids.resolve_gpus(devices.discover_devices(backend), backend)
        assert devs and devs[0].kind == devices.GPU_KIND, backend.reason
        envs = [devices.instance_environ([d]) for d in devs]
        instances = [(t, f"{r}.{d.id}") for r in range(repeat) for t in sorted(rates) for d in devs]
        labels = [d.label for d in devs]
        record = manifest.ManifestWriter.start(
            folder, bidkit.PROFILE, sorted(rates), repeat, labels, instances
        )
        record.keep_machine()
        record.keep("profile", find_profile(bidkit.PROFILE).read_text(encoding="utf-8"))
        rng = random.Random(seed)
        for r in range(repeat):
            for test in sorted(rates):
                steady = {d.id: rates[test] * (1 + noise * rng.gauss(0, 1)) for d in devs}
                made = side_by_side(test, str(r), envs, steady, clock)
                for job_id, data in made:
                    stamp = utc_stamp(data["finished_at"])
                    path = write(folder, data, result_filename(test, job_id, True, stamp))
                    bidkit.write_log(folder, data, path)
                    record.instance_ended(test, job_id, path, True)
                clock.advance(INTERVAL)  # the supervisor starts the next test
        record.finish("complete")
    return folder


def side_by_side(
    test: str, repeat: str, envs: list[dict[str, str]], steady: dict[str, float], clock: FakeClock
) -> list[tuple[str, dict[str, Any]]]:
    """One instance of ``test`` on each GPU at the same time (``envs``: the environment
    `jobs` gives each), every GPU monitor sampled each second: (job id, result) each."""
    ids = [devices.visible_ids(env) or [] for env in envs]
    gpus = [gpuids.instance_gpus(env) for env in envs]
    mons = [monitors.gpu_monitor(ids=i, interval=INTERVAL) for i in ids]
    for mon in mons:
        mon.sample()  # the monitor's first reading, as its thread takes at start
    clock.advance(INTERVAL)  # importing torch and building the model
    start = clock.now
    clock.advance(0.02)  # the warm-up block (rate_record's warmup_time, and its sync)
    rates = {gid: rate_series(value) for gid, value in steady.items()}
    ends: list[float] = []
    last = clock.now
    for _ in range(len(next(iter(rates.values())))):
        clock.advance(SLICE + OVERHEAD)
        ends.append(clock.now)
        if clock.now - last >= INTERVAL:
            last = clock.now
            for mon in mons:
                mon.sample()
    for mon in mons:
        mon.sample()  # the runner's reading after the test, so the samples bracket its window
    made = []
    for env, own, mon in zip(envs, gpus, mons, strict=True):
        label = devices.instance_device_label(env)
        timer = replace(
            rate_record(rates[label.split(":", 1)[1]], SLICE),
            start=start,
            duration=ends[-1] - start,
            slice_ends=tuple(ends),
        )
        made.append((f"{repeat}.{own[0].id}", result(test, repeat, env, timer, mon.stop(), own)))
    return made


def result(
    test: str,
    repeat: str,
    env: dict[str, str],
    timer: records.RateRecord,
    monitor: dict[str, Any],
    gpus: tuple[gpuids.GpuIdentity, ...],
) -> dict[str, Any]:
    """The result of one instance, as runner._test_record makes it."""
    label = devices.instance_device_label(env)
    ids = [g.id for g in gpus]
    names = {g.uuid or g.id: f"cuda:{g.id}" for g in gpus}  # the monitor's keys -> labels
    system = sysinfo.system_record()
    if system.get("gpu_backend") == "amdsmi":
        system.update(ROCM_TORCH)
    diag = energy.with_throttle(diagnostics.steady_state(timer.rates, SLICE), timer, monitor, names)
    device = int(ids[0]) if ids[0].isdigit() else 0
    return records.ResultRecord(
        name=test,
        job_id=f"{repeat}.{ids[0]}",
        dataroot="/data",
        outdir="/results",
        call=records.Call("x:main", bidkit.quick_argv(test), None),
        failure=None,
        error=None,
        device=label,
        devices=ids,
        gpu=records.gpu_name(system, ids),
        device_count=len(ids),
        gpu_identity=gpus,
        environ=records.recorded_environ(env),
        isolation={
            "cgroups": {"cpuset": f"/student{device}", "memory": f"/student{device}"},
            "cpus": [device],
            "memory_limit": 2**30,
        },
        returncode=0,
        metrics={"loss": 0.5},
        timings={"train": timer},
        gpu_monitor=monitor,
        cpu_monitor={"samples": []},
        diagnostics={"train": diag},
        energy=energy.energy_record(label, {"train": timer}, monitor, names),
        slurm=None,
        system=system,
        finished_at=time.time(),
    ).to_dict()
