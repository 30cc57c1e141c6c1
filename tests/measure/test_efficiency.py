"""FLOP counting of a training step, the efficiency record in a result, the peak table."""

from __future__ import annotations

import json
import math
import types

import pytest

from conftest import milarun
from milarun.measure import efficiency
from milarun.measure.experiment import Experiment, RateLog

torch = pytest.importorskip("torch")

BATCH, IN, HIDDEN, OUT = 16, 8, 32, 4


def two_layer_step(autocast: bool = False):
    """A training step (forward, backward, SGD) of Linear(IN, HIDDEN) -> Linear(HIDDEN, OUT)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(BATCH, IN)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(x).float().square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


# A Linear layer's forward is 2*batch*in*out FLOPs; backward computes the weight gradient
# (as much again) and, unless it is the first layer (the input needs no gradient), the
# input gradient (as much again). The optimizer and ReLU add nothing.
HAND_COUNT = 2 * (2 * BATCH * IN * HIDDEN) + 3 * (2 * BATCH * HIDDEN * OUT)


def test_counted_step_is_forward_plus_backward():
    counted = efficiency.count_step(two_layer_step())
    assert counted["flops"] == HAND_COUNT
    assert counted["by_precision"] == {"fp32": HAND_COUNT}
    assert counted["unsupported"] == []


def test_counts_with_a_torch_whose_counter_has_no_skip_unsupported(monkeypatch):
    # torch 2.11 (the GPU machines' image): FlopCounterMode(skip_unsupported=...) raised
    # TypeError, then get_unsupported_ops was missing: every H100 result lost its FLOPs.
    from torch.utils import flop_counter

    real = flop_counter.FlopCounterMode

    class OlderCounter:
        """Only what torch 2.11's counter has (read off an H100 machine's torch)."""

        def __init__(self, mods=None, depth=2, display=True, custom_mapping=None):
            self._real = real(display=display)
            self.flop_registry = self._real.flop_registry

        def get_total_flops(self):
            return self._real.get_total_flops()

        def __enter__(self):
            self._real.__enter__()
            return self

        def __exit__(self, *exc):
            return self._real.__exit__(*exc)

    monkeypatch.setattr(flop_counter, "FlopCounterMode", OlderCounter)
    counted = efficiency.count_step(two_layer_step())
    assert counted["flops"] == HAND_COUNT and counted["unsupported"] is None


def test_autocast_precision_is_detected():
    counted = efficiency.count_step(two_layer_step(autocast=True))
    assert counted["flops"] == HAND_COUNT
    assert counted["by_precision"] == {"bf16": HAND_COUNT}


def fake_log(rate: float, slices: int = 30) -> RateLog:
    log = RateLog("train")
    log.rates = [rate] * slices
    return log


def cpu_experiment() -> Experiment:
    return Experiment("t", device=torch.device("cpu"))


def test_measure_builds_the_record_on_cpu():
    record = efficiency.measure(cpu_experiment(), two_layer_step(), BATCH, fake_log(100.0))
    assert record.flops_per_step == HAND_COUNT
    assert record.flops_per_example == HAND_COUNT / BATCH
    assert record.achieved_flops == pytest.approx(HAND_COUNT / BATCH * 100.0)
    assert record.precision == "fp32"
    assert record.device_name == "cpu"
    assert record.peak_flops is None and record.percent_of_peak is None
    assert "no published fp32 peak" in record.note
    assert record.to_dict()["settings"] == {
        "tf32_capable": False,  # a CPU has no TF32
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
    }


def test_the_settings_are_those_the_test_left_in_force(monkeypatch):
    # A test that turns on TF32 matmuls or cudnn autotuning is recorded as such, also
    # when FLOP counting is off.
    monkeypatch.setenv(efficiency.ENV_FLAG, "0")
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        record = efficiency.measure(cpu_experiment(), two_layer_step(), BATCH, fake_log(1.0))
    finally:
        torch.set_float32_matmul_precision(previous)
    assert record.flops_per_step is None
    assert record.settings["float32_matmul_precision"] == "high"
    assert record.settings["tf32_matmul"] is True and record.settings["cudnn_benchmark"]


@pytest.mark.parametrize(
    "hip, capability, capable",
    [(None, (8, 0), True), (None, (7, 0), False), ("6.2", (9, 4), False)],
)
def test_tf32_capable_is_an_nvidia_gpu_from_ampere(monkeypatch, hip, capability, capable):
    """V100 (7.0): no TF32 units, the 2020 figures' case; A100 (8.0) and later: TF32 where
    torch allows it; ROCm devices are not counted."""
    monkeypatch.setattr(torch.version, "hip", hip)
    if hip:  # a ROCm build has no CUDA version: the build torch.version says is HIP's
        monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert efficiency.tf32_capable(torch.device("cuda", 0)) is capable
    assert efficiency.tf32_capable(torch.device("cpu")) is False
    assert efficiency.precision_settings(torch.device("cuda", 0))["tf32_capable"] is capable
    assert efficiency.precision_settings()["tf32_capable"] is None  # device unknown


def test_measure_on_a_known_gpu_gives_percent_of_peak():
    count = {"flops": 312 * 10**12, "by_precision": {"bf16": 312 * 10**12}, "unsupported": []}
    record = efficiency.build_record(count, 100, 0.5, "NVIDIA A100-SXM4-80GB")
    assert record.flops_per_example == 3.12e12
    assert record.percent_of_peak == pytest.approx(0.5)
    assert record.peak_flops == 312e12
    assert record.note is None
    assert list(record.to_dict()) == [
        "flops_per_example",
        "flops_per_step",
        "precision",
        "flops_by_precision",
        "achieved_flops",
        "device_name",
        "peak_flops",
        "percent_of_peak",
        "note",
        "settings",
        "method",
    ]


def test_a_formula_replaces_the_counted_step():
    calls = []
    formula = efficiency.Formula(6e9, "bf16", "formula: 6N")
    record = efficiency.measure(
        cpu_experiment(),
        lambda: calls.append(1),
        2048,
        fake_log(1000.0),
        formula=formula,
        settings={"attention": "flash"},
    )
    assert calls == []  # no extra step: the FLOPs are the formula's
    assert record.flops_per_example == 6e9 and record.flops_per_step == 6e9 * 2048
    assert record.achieved_flops == 6e12 and record.precision == "bf16"
    assert record.method == "formula: 6N"
    assert record.settings["attention"] == "flash" and "tf32_matmul" in record.settings


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv(efficiency.ENV_FLAG, "0")
    calls = []
    record = efficiency.measure(cpu_experiment(), lambda: calls.append(1), 1, fake_log(1.0))
    assert calls == []  # no extra step at all
    assert record.flops_per_example is None
    assert efficiency.ENV_FLAG in record.note


def test_a_failing_step_only_loses_the_count():
    def step():
        raise RuntimeError("unsupported op")

    record = efficiency.measure(cpu_experiment(), step, 1, fake_log(1.0))
    assert record.flops_per_example is None
    assert "RuntimeError: unsupported op" in record.note


def test_environment_stepping_is_not_counted():
    gym = types.ModuleType("gymnasium")
    step = types.FunctionType((lambda: None).__code__, {"gymnasium": gym})
    assert efficiency.steps_environments(step)
    assert not efficiency.steps_environments(two_layer_step())
    record = efficiency.measure(cpu_experiment(), step, 1, fake_log(1.0))
    assert record.flops_per_example is None and "environments" in record.note


def test_a_step_without_matmuls_has_no_count():
    record = efficiency.measure(cpu_experiment(), lambda: torch.ones(4).sum(), 4, fake_log(1.0))
    assert record.flops_per_example is None and "no matmul" in record.note


@pytest.mark.slow
def test_record_in_a_real_result(tmp_path):
    done = milarun(
        "run", "milabench.models.polynome:main", "-o", tmp_path, "--", "--min-slices", "4"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = tmp_path.glob("*.json")
    eff = json.loads(path.read_text())["efficiency"]
    assert math.isfinite(eff["flops_per_example"]) and eff["flops_per_example"] > 0
    assert math.isfinite(eff["achieved_flops"]) and eff["achieved_flops"] > 0
    assert eff["flops_per_step"] == eff["flops_per_example"] * 256  # the default batch
    assert eff["precision"] == "fp32" and eff["device_name"] == "cpu"
    assert eff["percent_of_peak"] is None and eff["note"]


# -- peak table ------------------------------------------------------------------------
SPELLINGS = {
    "Tesla V100-SXM2-16GB": "V100-SXM2",
    "Tesla V100-SXM2-32GB": "V100-SXM2",
    "NVIDIA V100-SXM2-32GB": "V100-SXM2",
    "Tesla V100-PCIE-16GB": "V100-PCIe",
    "Tesla V100-PCIE-32GB": "V100-PCIe",
    "Tesla V100S-PCIE-32GB": "V100S-PCIe",
    "NVIDIA A100-SXM4-40GB": "A100-SXM",
    "NVIDIA A100-SXM4-80GB": "A100-SXM",
    "NVIDIA A100-PCIE-40GB": "A100-PCIe",
    "NVIDIA A100 80GB PCIe": "A100-PCIe",
    "NVIDIA H100 80GB HBM3": "H100-SXM",
    "NVIDIA H100 SXM5 80GB": "H100-SXM",
    "NVIDIA H100 PCIe": "H100-PCIe",
    "NVIDIA H200": "H200-SXM",
    "AMD Instinct MI250X": "MI250X",
    "AMD Instinct MI250X / MI250": "MI250X",
    "AMD Instinct MI300X": "MI300X",
    "AMD Instinct MI300X VF": "MI300X",
    "NVIDIA B200": "B200",
    "NVIDIA GB200": "GB200",
    "NVIDIA H20": "H20",
    "NVIDIA L40S": "L40S",
    "AMD Instinct MI325X": "MI325X",
    "AMD Instinct MI355X": "MI355X",
    "NVIDIA H200 NVL": "H200-NVL",
    "NVIDIA B300 SXM6 AC": "B300",
    "GAUDI3": "Gaudi3",
    "HL-325L": "Gaudi3",
}
UNKNOWN = [
    "cpu",
    "",
    None,
    "NVIDIA GeForce RTX 4090",
    "NVIDIA H100 NVL",
    "NVIDIA GH200 480GB",
    "NVIDIA GB300",
    "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
    "AMD Instinct MI300A",
    "AMD Instinct MI250",
    "AMD Instinct MI350X",
    "NVIDIA L40",
    "NVIDIA A10",
    "Tesla V100-DGXS-32GB",
]
# Datasheet anchors (dense TFLOP/s), one per family, read from the vendors' sheets: the
# table must agree with them; the rest of it is checked for consistency below.
ANCHORS = {
    ("V100-SXM2", "fp16"): 125,
    ("A100-SXM", "tf32"): 156,
    ("H100-SXM", "bf16"): 989.5,
    ("H100-PCIe", "fp32"): 51,
    ("MI300X", "fp16"): 1307.4,
    ("V100-SXM2", "bf16"): None,
    ("H100-SXM", "fp8"): 1979,
    ("B200", "bf16"): 2250,
    ("GB200", "fp8"): 5000,
    ("H20", "bf16"): 148,
    ("L40S", "fp16"): 362.05,
    ("MI325X", "bf16"): 1307.4,
    ("MI355X", "fp8"): 5033.2,
    ("MI355X", "tf32"): None,
    ("H200-NVL", "bf16"): 835.5,
    ("B300", "fp8"): 4500,
    ("Gaudi3", "bf16"): 1835,
}


@pytest.mark.parametrize("name,row", sorted(SPELLINGS.items()))
def test_device_names_match_their_row(name, row):
    assert efficiency.match_device(name) == row


@pytest.mark.parametrize("row,precision", sorted(ANCHORS, key=str))
def test_peaks_agree_with_the_datasheets(row, precision):
    name = next(n for n, r in SPELLINGS.items() if r == row)
    tflops = ANCHORS[row, precision]
    peak = efficiency.peak_flops(name, precision)
    assert peak == (pytest.approx(tflops * 1e12) if tflops else None)


def test_peak_table_is_consistent():
    """Every row is reachable by a device name; matrix paths beat plain FP32, fp16 runs at
    twice tf32 where both exist, and bf16 equals fp16 where a device has it."""
    assert set(SPELLINGS.values()) == set(efficiency.PEAKS)
    for name, row in SPELLINGS.items():
        peak = {p: efficiency.peak_flops(name, p) for p in efficiency.PRECISIONS}
        if row == "Gaudi3":  # its sheet gives BF16 and FP8 matrix figures only, equal
            assert peak["bf16"] == peak["fp8"] and not (peak["fp16"] or peak["tf32"]), row
            continue
        assert peak["fp32"] and peak["fp16"] and peak["fp16"] > peak["fp32"], row
        if peak["tf32"]:  # rounded sheets (the L40S's: 2 x 183 against 362.05; B200's too)
            rel = {"L40S": 0.015, "B200": 0.025}.get(row, 0.005)
            assert peak["fp16"] == pytest.approx(2 * peak["tf32"], rel=rel), row
        if peak["fp8"]:
            assert peak["fp8"] == pytest.approx(2 * peak["fp16"], rel=0.015), row
        if peak["bf16"]:
            assert peak["bf16"] == pytest.approx(peak["fp16"]), row


@pytest.mark.parametrize("name", UNKNOWN)
def test_unknown_devices_have_no_peak(name):
    assert efficiency.match_device(name) is None
    assert efficiency.peak_flops(name, "fp32") is None
    assert efficiency.percent_of_peak(name, "fp16", 1e12) is None


def test_percent_of_peak():
    assert efficiency.percent_of_peak("NVIDIA H100 80GB HBM3", "bf16", 989.5e12 / 4) == 25.0
    assert efficiency.percent_of_peak("NVIDIA A100-SXM4-80GB", "tf32", 78e12) == 50.0
    assert efficiency.percent_of_peak("Tesla V100-SXM2-16GB", "bf16", 1e12) is None
    assert efficiency.percent_of_peak("NVIDIA A100-SXM4-80GB", "fp8", 1e12) is None
    assert efficiency.percent_of_peak("NVIDIA H200", "fp8", 1979e12 / 2) == 50.0
    assert efficiency.percent_of_peak("NVIDIA H200", "fp16", None) is None


def test_no_torch_at_import():
    import subprocess
    import sys

    code = "import sys, milarun.measure.efficiency; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
