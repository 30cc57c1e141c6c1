"""Energy per example, perf per watt and throttling (milarun/energy.py, report_energy.py):
a fake NVML whose readings move with time, fake clocks for the window math, a real run on
this CPU, and reports of results with known energy."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from conftest import load_all, milarun
from fakes import FakeNVML, run_on_fake_gpu
from milarun.machine import monitors
from milarun.machine.gpu.nvml import NvmlBackend
from milarun.measure import energy, runner
from milarun.measure.diagnostics import steady_state
from milarun.measure.experiment import RateLog
from milarun.results import steady
from milarun.results.records import RateRecord
from resultfactory import result, write

POWER_CAP, HW_SLOWDOWN, THERMAL, IDLE, SYNC_BOOST = 4, 8, 32, 1, 16


class MovingNVML(FakeNVML):
    """FakeNVML whose power follows ``power(t)`` (W, wall clock) and whose energy counter
    is its integral since construction; clock-event reasons follow ``reasons(t)``.
    ``old_names``: the pre-12 pynvml spelling (ClocksThrottleReasons)."""

    def __init__(self, power=lambda t: 300.0, reasons=lambda t: IDLE, old_names=False):
        super().__init__(
            [
                {
                    "name": "NVIDIA H100 80GB HBM3",
                    "uuid": "GPU-h100",
                    "utilization": [99, 0],
                    "memory_used": 2**30,
                    "memory": 80 * 2**30,
                    "temperature": 60,
                    "power_usage_mw": 0,
                }
            ]
        )
        self.power, self.reasons, self.t0 = power, reasons, time.time()
        self.energy_read_at: list[float] = []
        name = (
            "nvmlDeviceGetCurrentClocksThrottleReasons"
            if old_names
            else "nvmlDeviceGetCurrentClocksEventReasons"
        )
        setattr(self, name, lambda h: self.reasons(time.time()))

    def nvmlDeviceGetPowerUsage(self, handle):
        return 1000.0 * self.power(time.time())  # mW

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # mJ; power is constant in tests
        now = time.time()
        self.energy_read_at.append(now)
        return 1000.0 * self.power(now) * (now - self.t0)

    def nvmlDeviceGetClockInfo(self, handle, clock):
        assert clock == 1  # NVML_CLOCK_SM
        return 1980 if self.reasons(time.time()) & ~IDLE == 0 else 1410


def record(ends, rates=None, width=0.5):
    """A rate record with these slice end times (wall clock)."""
    rates = tuple(rates or [100.0] * len(ends))
    return RateRecord(None, 0.0, 0.0, 0, None, 0, 0, width, None, rates, slice_ends=tuple(ends))


def samples(times, gid="0", **series):
    """Monitor samples at these wall times; each keyword is a reading: a list or f(t)."""
    out = []
    for k, t in enumerate(times):
        reading = {key: (v(t) if callable(v) else v[k]) for key, v in series.items()}
        out.append({"time": t, "t": t, "gpus": {gid: reading}})
    return out


# -- the monitor -----------------------------------------------------------------------
@pytest.mark.parametrize("old_names", [False, True])
def test_monitor_reads_energy_clock_and_reasons(old_names):
    fake = MovingNVML(power=lambda t: 250.0, reasons=lambda t: POWER_CAP, old_names=old_names)
    mon = monitors.gpu_monitor(backend=NvmlBackend(fake), ids=["0"], interval=0.05).start()
    time.sleep(0.3)
    got = mon.stop()["samples"]
    assert len(got) >= 3
    readings = [s["gpus"]["0"] for s in got]
    assert all(r["power"] == pytest.approx(250.0) for r in readings)
    assert all(r["sm_clock"] == 1410 and r["clock_events"] == POWER_CAP for r in readings)
    # The counter is in J and moves with time: 250 W between two of its readings. (Timed by
    # when the fake was read: a busy CPU can delay a reading after its sample's stamp.)
    read_at = fake.energy_read_at[: len(got)]
    (a, ra), (b, rb) = (read_at[0], readings[0]), (read_at[-1], readings[-1])
    assert rb["energy"] > ra["energy"]
    assert (rb["energy"] - ra["energy"]) / (b - a) == pytest.approx(250.0, rel=1e-6)
    # each sample is stamped with the wall clock taken just before its readings
    assert all(s["time"] <= t for s, t in zip(got, read_at))
    assert [s["time"] for s in got] == sorted(s["time"] for s in got)


def test_only_the_rank_that_writes_the_result_reads_the_energy_counter(monkeypatch):
    monkeypatch.setenv("RANK", "1")  # 4 ms of CPU per reading on an H100: rank 0's only
    mon = monitors.gpu_monitor(backend=NvmlBackend(MovingNVML()), ids=["0"], interval=0.05).start()
    time.sleep(0.1)
    reading = mon.stop()["samples"][0]["gpus"]["0"]
    assert reading["energy"] is None and reading["power"] == pytest.approx(300.0)


def test_monitor_without_the_new_readings_records_none():
    mon = monitors.gpu_monitor(
        backend=NvmlBackend(
            FakeNVML(
                [
                    {
                        "name": "old",
                        "uuid": "GPU-x",
                        "utilization": [5, 0],
                        "memory_used": 1,
                        "memory": 2,
                        "temperature": 30,
                        "power_usage_mw": 50000,
                    }
                ]
            )
        ),
        ids=["0"],
        interval=0.05,
    ).start()
    time.sleep(0.1)
    reading = mon.stop()["samples"][0]["gpus"]["0"]
    assert reading["energy"] is None and reading["sm_clock"] is None
    assert reading["clock_events"] is None and reading["power"] == 50.0


# -- the window in wall-clock time ---------------------------------------------------------
def test_rate_log_records_when_each_slice_closed():
    # Blocks of 0.3 s of work with 0.1 s between them; wall clock = clock + 1000.
    now = [0.0]
    log = RateLog(clock=lambda: now[0], wallclock=lambda: now[0] + 1000.0)
    for _ in range(7):
        with log.block(30):
            now[0] += 0.3
        now[0] += 0.1
    log.finish()
    # Block 0 (0.0-0.3) is the warm-up. Sliced blocks 0.4-0.7, 0.8-1.1, 1.2-1.5, 1.6-1.9,
    # 2.0-2.3, 2.4-2.7: each slice closes after 0.5 s of in-block time, at 1.0 (0.2 s into
    # the second block), 1.7, 2.3; the partial last slice ends with the last block.
    assert log.slice_ends == pytest.approx([1001.0, 1001.7, 1002.3, 1002.7])
    assert len(log.rates) == 4
    assert log.record().to_dict()["slice_ends"] == pytest.approx(log.slice_ends)
    assert list(log.record().to_dict())[-1] == "slice_ends"  # new keys come last


def test_a_long_block_spreads_its_slice_ends_over_its_time():
    now = [0.0]
    log = RateLog(clock=lambda: now[0], wallclock=lambda: now[0], warmup_blocks=0)
    with log.block(120):
        now[0] += 1.2  # one block of 1.2 s closes two slices, at 0.5 and 1.0
    assert log.slice_ends == pytest.approx([0.5, 1.0])


def test_window_spans_and_examples():
    ends = [10.0 + 0.5 * i for i in range(1, 25)]  # 24 slices closing 10.5 ... 22.0
    win = steady.wall_clock_window(record(ends, [200.0] * 24))
    assert len(win.spans) == 18  # rates[-20:-2]: slices 4 ... 21
    assert (win.start, win.end) == (ends[3], ends[21])
    assert win.examples == pytest.approx(18 * 200 * 0.5)
    short = steady.wall_clock_window(record(ends[:5]))  # 5 slices: a window of 3 from slice 0
    assert short.start == pytest.approx(ends[0] - 0.5) and len(short.spans) == 3
    assert steady.wall_clock_window(record(ends[:4])) is None  # 2 slices: no window
    assert (
        steady.wall_clock_window(RateRecord(None, 0, 0, 0, None, 0, 0, 0.5, None, (1.0,) * 24))
        is None
    )  # no slice times


# -- energy over the window --------------------------------------------------------------
def profile(t):
    """Power (W): 100 until t=4, a ramp to 400 at t=8, 400 after."""
    return 100.0 if t <= 4 else 400.0 if t >= 8 else 100.0 + 75.0 * (t - 4)


def counter(t):
    """The exact integral of ``profile`` from 0 (J)."""
    ramp = min(max(t - 4, 0), 4)
    return 100.0 * min(t, 4) + 100.0 * ramp + 37.5 * ramp**2 + 400.0 * max(t - 8, 0)


def test_counter_and_power_agree_on_a_known_profile():
    times = [float(t) for t in range(13)]
    window = (2.5, 10.5)  # ends where the power is constant: both methods are exact
    exact = counter(10.5) - counter(2.5)
    by_counter = energy.gpu_energy(samples(times, energy=counter, power=profile), "0", *window)
    by_power = energy.gpu_energy(samples(times, power=profile), "0", *window)
    assert by_counter == (pytest.approx(exact), "counter")
    assert by_power == (pytest.approx(exact), "power")
    assert exact == pytest.approx(1.5 * 100 + 4 * 250 + 2.5 * 400)


def test_a_window_between_two_samples_interpolates():
    got = samples([0.0, 10.0], energy=[5000.0, 6000.0], power=[100.0, 100.0])
    assert energy.gpu_energy(got, "0", 2.5, 7.5) == (pytest.approx(500.0), "counter")
    assert energy.integrate(energy._series(got, "0", "power"), 2.5, 7.5) == pytest.approx(500.0)
    assert energy.gpu_energy(got, "0", -1.0, 5.0) is None  # not covered by the samples


def test_a_restarted_counter_falls_back_to_power():
    got = samples([0.0, 5.0, 10.0], energy=[9000.0, 50.0, 1050.0], power=[200.0] * 3)
    assert energy.gpu_energy(got, "0", 1.0, 9.0) == (pytest.approx(1600.0), "power")


def test_energy_record_of_one_gpu():
    ends = [100.0 + 0.5 * i for i in range(1, 25)]
    got = samples([99.0 + k for k in range(15)], energy=lambda t: 300.0 * t)
    rec = energy.energy_record("cuda:0", {"train": record(ends, [150.0] * 24)}, {"samples": got})
    assert rec.joules == pytest.approx(300 * 9) and rec.seconds == pytest.approx(9)
    assert rec.watts == pytest.approx(300) and rec.examples == pytest.approx(18 * 75)
    assert rec.joules_per_example == pytest.approx(2700 / 1350)
    assert rec.examples_per_joule == pytest.approx(150 / 300)  # examples/s per W
    assert rec.method == "counter" and rec.gpus == ("cuda:0",) and rec.reason is None
    assert list(rec.to_dict()) == [
        "joules",
        "seconds",
        "watts",
        "examples",
        "joules_per_example",
        "examples_per_joule",
        "method",
        "gpus",
        "reason",
        "backend",  # the device backend whose monitor measured (None: no record of it)
    ]


def test_distributed_energy_covers_every_gpu_of_the_job():
    ends = [100.0 + 0.5 * i for i in range(1, 25)]
    times = [99.0 + k for k in range(15)]
    both = [{"time": t, "gpus": {"0": {"energy": 300.0 * t}, "1": {"power": 100.0}}} for t in times]
    timings = {
        "train": record(ends),
        "train_0": record(ends, [100.0] * 24),
        "train_1": record(ends, [50.0] * 24),
    }
    rec = energy.energy_record("cuda:0", timings, {"samples": both})
    assert rec.gpus == ("cuda:0", "cuda:1") and rec.method == "counter+power"
    assert rec.joules == pytest.approx(400 * 9)
    assert rec.examples == pytest.approx(9 * 150)  # both ranks' examples
    one = energy.energy_record("cuda:0", timings, {"samples": samples(times, energy=[1] * 15)})
    assert one.joules is None and one.reason.startswith("rank 0 sees 1 of the job's 2 GPUs")


def test_gpus_are_named_as_the_operator_named_them():
    labels = {"GPU-aa": "cuda:2", "GPU-bb": "cuda:5"}  # the monitor's keys are UUIDs
    got = [{"time": float(t), "gpus": {"GPU-bb": {"energy": 10.0 * t}}} for t in range(30)]
    rec = energy.energy_record(
        "cuda:5", {"train": record([i + 0.5 for i in range(24)])}, {"samples": got}, labels
    )
    assert rec.gpus == ("cuda:5",) and rec.watts == pytest.approx(10.0)
    assert energy.gpu_label("3") == "cuda:3"


def test_energy_is_null_with_a_reason():
    train = {"train": record([float(i) for i in range(24)])}
    cpu = energy.energy_record("cpu:0", train, {"samples": []})
    assert cpu.to_dict()["joules"] is None and cpu.reason == energy.NO_GPU
    none = energy.energy_record("cuda:0", train, {"samples": [], "note": "no samples: NVML"})
    assert none.reason == "no samples: NVML" and none.examples_per_joule is None
    got = samples([float(i) for i in range(30)], load=[0.5] * 30)
    blind = energy.energy_record("cuda:0", train, {"samples": got})
    assert "no energy counter or power" in blind.reason


# -- throttling ----------------------------------------------------------------------------
def test_throttled_samples_flag_exactly_the_overlapping_slices():
    # Window slice i spans [3 + 0.5 i, 3.5 + 0.5 i] (i = 0..17); samples every second,
    # each standing for +/- 0.5 s around it.
    ends = [3.5 + 0.5 * i for i in range(20)]
    masks = {5: POWER_CAP, 6: POWER_CAP, 12: HW_SLOWDOWN | THERMAL, 8: SYNC_BOOST | IDLE}
    got = samples([float(t) for t in range(16)], clock_events=lambda t: masks.get(int(t), IDLE))
    throttle = energy.throttle_record(record(ends), {"interval": 1.0, "samples": got})
    # sample 5 covers [4.5, 5.5]: slices 3, 4; sample 6: 5, 6 (slice 2, [4.0, 4.5], only
    # touches it); sample 12 covers [11.5, 12.5]: slice 17, [11.5, 12.0].
    assert throttle.to_dict() == {
        "slices": 5,
        "window_slices": 18,
        "gpus": {
            "cuda:0": {
                "slices": 5,
                "fault_slices": 1,  # the hardware and thermal slowdowns, in one slice
                "power_limit_slices": 4,  # the operating point, not a fault
                "reasons": {"HwSlowdown": 1, "SwPowerCap": 4, "SwThermalSlowdown": 1},
                "sm_clock_mhz": None,  # these samples read no clock
            }
        },
        "fault_slices": 1,
        "power_limit_slices": 4,
    }
    diag = energy.with_throttle(
        steady_state([100.0] * 20), record(ends), {"interval": 1.0, "samples": got}
    )
    assert diag.flags == ("throttle",) and diag.to_dict()["throttle"]["slices"] == 5
    calm = samples([float(t) for t in range(16)], clock_events=lambda t: IDLE)
    quiet = energy.with_throttle(
        steady_state([100.0] * 20), record(ends), {"interval": 1.0, "samples": calm}
    )
    assert quiet.flags == () and quiet.throttle["slices"] == 0
    unknown = samples([float(t) for t in range(16)], power=[1.0] * 16)
    assert energy.throttle_record(record(ends), {"samples": unknown}) is None


# -- a whole run ---------------------------------------------------------------------------
def test_real_cpu_run_records_null_energy_with_a_reason(tmp_path):
    done = milarun(
        "run", "milabench.models.calibration:main", "-o", tmp_path, "--", "--min-slices", "5"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (written,) = load_all(tmp_path).values()
    assert written["energy"]["reason"] == "no GPU: CPU energy is not measured"
    assert all(written["energy"][k] is None for k in ("joules", "watts", "examples_per_joule"))
    assert written["diagnostics"]["train"]["throttle"] is None
    slice_ends = written["timings"]["train"]["slice_ends"]
    assert len(slice_ends) == len(written["timings"]["train"]["rates"])
    assert slice_ends == sorted(slice_ends) and abs(slice_ends[-1] - time.time()) < 600


def test_run_on_a_fake_gpu_records_energy_and_throttling(tmp_path, monkeypatch):
    """The runner end to end, in process: a fake H100 at 250 W held at its power cap."""
    fake = MovingNVML(power=lambda t: 250.0, reasons=lambda t: POWER_CAP)
    run_on_fake_gpu(monkeypatch, fake)
    result, path = runner.run_test(
        "milabench.models.calibration:main",
        ["--min-slices", "5", "--step-time", "0.02"],
        "calibration",
        "0",
        tmp_path,
        tmp_path,
    )
    assert result["success"] and path is not None
    rec = result["energy"]
    assert rec["method"] == "counter" and rec["gpus"] == ["cuda:0"]
    assert rec["watts"] == pytest.approx(250.0, rel=0.02)
    rate = steady.rate(result["timings"]["train"]["rates"])
    assert rec["examples_per_joule"] == pytest.approx(rate / 250.0, rel=0.05)
    assert rec["joules_per_example"] == pytest.approx(1 / rec["examples_per_joule"])
    diag = result["diagnostics"]["train"]
    window = diag["window_slices"]
    # at its power limit: its operating point, recorded, not flagged as throttling
    assert "throttle" not in diag["flags"] and window >= 3
    assert diag["throttle"]["slices"] == diag["throttle"]["window_slices"] == window
    assert diag["throttle"]["power_limit_slices"] == window
    assert diag["throttle"]["fault_slices"] == 0
    assert diag["throttle"]["gpus"]["cuda:0"]["reasons"] == {"SwPowerCap": window}
    assert diag["throttle"]["gpus"]["cuda:0"]["sm_clock_mhz"] == 1410


# -- reports -------------------------------------------------------------------------------
def gpu_result(name, job_id, rate, device, joules_per_example=None, throttled=0, **kw):
    """A GPU result with energy (perf/W = 1 / joules_per_example) and, when ``throttled``,
    that many slices of 18 in a thermal slowdown."""
    energy_rec = (
        {
            "joules": 9 * rate * joules_per_example,
            "seconds": 9.0,
            "watts": rate * joules_per_example,
            "examples": 9 * rate,
            "joules_per_example": joules_per_example,
            "examples_per_joule": 1 / joules_per_example,
            "method": "counter",
            "gpus": [device],
            "reason": None,
        }
        if joules_per_example
        else {"joules": None, "reason": energy.NO_GPU}
    )
    diag = {
        "slices": 24,
        "window_slices": 18,
        "flags": ["throttle"] if throttled else [],
        "throttle": {
            "slices": throttled,
            "window_slices": 18,
            "gpus": {
                device: {
                    "slices": throttled,
                    "reasons": {"SwThermalSlowdown": throttled} if throttled else {},
                }
            },
        },
    }
    return result(
        name, job_id, rate, device=device, energy=energy_rec, diagnostics={"train": diag}, **kw
    )


@pytest.fixture(scope="module")
def energy_results(tmp_path_factory):
    """gpu.convnet (weight 2): 2 runs at 1000/s, 0.5 and 0.25 J/example (perf/W 2 and 4,
    mean 3), one of them power-capped in 6 of 18 slices; gpu.wlm (weight 1): 400/s,
    0.1 J/example (perf/W 10); gpu.cpuonly (weight 1): no energy."""
    root = tmp_path_factory.mktemp("energy")
    res = root / "results"
    write(res, gpu_result("gpu.convnet", "0.0", 1000.0, "cuda:0", 0.5, throttled=6))
    write(res, gpu_result("gpu.convnet", "0.1", 1000.0, "cuda:1", 0.25))
    write(res, gpu_result("gpu.wlm", "0.0", 400.0, "cuda:0", 0.1))
    write(res, gpu_result("gpu.cpuonly", "0.0", 50.0, "cpu:0"))
    weights = root / "weights.json"
    weights.write_text(json.dumps({"gpu.convnet": 2, "gpu.wlm": 1, "gpu.cpuonly": 1}))
    return res, weights


def test_summary_keeps_energy_and_throttling(energy_results):
    res, _ = energy_results
    done = milarun("summary", res)
    assert done.returncode == 0, done.stderr
    convnet = json.loads(done.stdout)["gpu.convnet"]
    assert convnet["energy"] == {
        "n": 2,
        "watts": pytest.approx(375.0),
        "joules_per_example": pytest.approx(0.375),
        "examples_per_joule": pytest.approx(3.0),
        "method": "counter",
    }
    assert convnet["throttle"] == {
        "cuda:0": {"window_slices": 18, "reasons": {"SwThermalSlowdown": 6}}
    }
    assert convnet["quality"]["flagged"] == {"throttle": 1}
    assert "energy" not in json.loads(done.stdout)["gpu.cpuonly"]


def test_report_shows_perf_per_watt_score_and_cost(energy_results, tmp_path):
    res, weights = energy_results
    args = (res, "--weights", weights, "--price", "30000", "--power-cost", "0.15")
    done = milarun("report", *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    tests = data["tests"]
    assert tests["gpu.convnet"]["perf_per_watt"] == pytest.approx(3.0)
    assert tests["gpu.wlm"]["perf_per_watt"] == pytest.approx(10.0)
    assert tests["gpu.cpuonly"]["perf_per_watt"] is None
    scores = data["scores"]
    assert scores["perf_per_watt_score"] == pytest.approx(
        math.exp((2 * math.log(3) + math.log(10)) / 3)
    )
    assert scores["perf_per_watt_coverage"] == pytest.approx(3 / 4)
    # 0.375 J/example x 1e6 / 3.6e6 J/kWh x 0.15 $/kWh
    assert data["energy"]["gpu.convnet"]["cost_per_million"] == pytest.approx(
        0.375e6 / 3.6e6 * 0.15
    )
    assert (
        "gpu.convnet: cuda:0 thermal slowdown (SwThermalSlowdown) in 6 of 18 steady slices"
        in data["warnings"]
    )

    text = milarun("report", *args, "--html", tmp_path / "r.html")
    assert text.returncode == 0, text.stderr
    out = text.stdout
    print(out)
    assert max(map(len, out.splitlines())) <= 100
    assert "perf/W" in out and "Perf/W score:" in out and "(coverage 75%" in out
    assert "Power cost ($/kWh):" in out and "$ per 1M examples" in out
    assert "Energy over the steady window" in out and "0.0156" in out  # $ per 1M, convnet
    assert "throttle:1" in out  # the quality table's flags
    assert (
        "- gpu.convnet: cuda:0 thermal slowdown (SwThermalSlowdown) in 6 of 18 steady slices" in out
    )
    page = (tmp_path / "r.html").read_text()
    assert '<table id="energy">' in page and "Perf/W score" in page
    assert "thermal slowdown (SwThermalSlowdown)" in page


def test_cpu_results_get_nothing_new(tmp_path):
    res = tmp_path / "results"
    write(res, result("cpu.a", "0.0", 100.0))
    write(res, result("cpu.a", "0.1", 110.0, energy={"joules": None, "reason": energy.NO_GPU}))
    done = milarun("report", res, "--format", "json")
    data = json.loads(done.stdout)
    assert "energy" not in data and "perf_per_watt_score" not in data["scores"]
    assert "perf_per_watt" not in data["tests"]["cpu.a"]
    text = milarun("report", res, "--power-cost", "0.2").stdout
    assert "perf/W" not in text and "Energy" not in text
    assert "--power-cost: no test has an energy measurement" in text


@pytest.mark.parametrize("value", ["-1", "0", "abc", "nan"])
def test_bad_power_cost_is_one_line(value, energy_results):
    res, _ = energy_results
    done = milarun("report", res, "--power-cost", value)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "--power-cost" in line and value in line


def test_a_bad_energy_entry_in_a_summary_is_named(tmp_path):
    entry = {
        "n": 1,
        "failures": 0,
        "train": {"n": 1, "mean": 5.0, "std": 0.0},
        "energy": {"examples_per_joule": "lots"},
    }
    path = Path(tmp_path / "s.json")
    path.write_text(json.dumps({"gpu.x": entry}))
    done = milarun("report", path)
    assert done.returncode == 1 and "'energy.examples_per_joule' is 'lots'" in done.stderr


@pytest.mark.parametrize(
    "energy_rec, throttle",
    [
        ({"joules_per_example": "x", "examples_per_joule": [1], "watts": None}, None),
        ({"joules_per_example": 0.5, "examples_per_joule": float("inf")}, {"gpus": [1]}),
        ({"joules_per_example": -1, "examples_per_joule": 2}, {"window_slices": "x", "gpus": {}}),
        ({}, {"window_slices": 18, "gpus": {"cuda:0": {"reasons": ["SwPowerCap"]}}}),
        ({}, {"window_slices": 18, "gpus": {"cuda:0": {"reasons": {"SwPowerCap": -3}}}}),
    ],
)
def test_hand_edited_energy_in_results_is_ignored(tmp_path, energy_rec, throttle):
    res = tmp_path / "results"
    write(
        res,
        result(
            "gpu.x",
            "0.0",
            100.0,
            device="cuda:0",
            energy=energy_rec,
            diagnostics={"train": {"throttle": throttle}},
        ),
    )
    done = milarun("report", res, "--power-cost", "0.1")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "perf/W" not in done.stdout and "power cap" not in done.stdout
