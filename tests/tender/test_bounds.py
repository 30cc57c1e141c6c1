"""Bounds a forger cannot move (issue 46): each bound of the evidence rule comes from
milarun (its FLOPs formulas and table, its datasheet, the run's system record), never from
the figure it bounds. The real H100 run passes; each forgery fails with one line naming
the bound; a bound not applied is said on the PASS line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bidkit
import forgery
from conftest import ROOT, milarun
from milarun.results import manifest
from milarun.results.folder import load_dir
from milarun.results.read import ResultView
from milarun.results.tender_rules import TenderRules
from milarun.tender import flops, package, rules, verify
from milarun.tender.evidence import rule as evidence

H100 = ROOT / "tests" / "data" / "gpu-runs" / "h100-2026-11-28" / "modern"


@pytest.fixture
def run(tmp_path) -> Path:
    folder = tmp_path / "modern"
    shutil.copytree(H100, folder)
    return folder


def found(folder: Path) -> tuple[list[str], str]:
    applied = evidence.Applied()
    problems, checked, _ = evidence.problems(
        folder, load_dir(folder), manifest.run_manifests(folder), applied=applied
    )
    return problems, applied.text(checked)


def test_the_honest_run_is_bounded_by_milarun_alone(run):
    problems, said = found(run)
    assert problems == []
    assert said == (
        "FLOPs per example recomputed by milarun for 7, the datasheet peak applied to 7, "
        "energy bounds (FLOPs per joule, a busy GPU's power and utilisation) to 7, the "
        "doctor's measured GEMM peak to 7; not applied: device id check: PCI device id in "
        "neither the system record nor the monitor's inventory (7)"
    )


@pytest.mark.parametrize(
    ("system", "sampled", "said"),
    [
        ("0x2330", None, None),
        ("0x2331", None, "system.gpus PCI device id 0x2331 is not the H100-SXM"),
        ("0x2330", "0x2330", None),
        (None, "0x2330", None),  # the inventory's id alone, the datasheet row's
        ("0x2330", "0x2331", "gpu_monitor.inventory PCI device id 0x2331 but system.gpus says"),
        (None, "0x2331", "gpu_monitor.inventory PCI device id 0x2331 is not the H100-SXM"),
    ],
)
def test_the_monitor_s_inventory_and_the_system_record_agree_on_the_pci_id(
    run, system, sampled, said
):
    """Records with the PCI device id (since issue 46; the H100 run predates it): the one the
    GPU monitor's backend read of the GPU it sampled is the system record's (a forger who
    edits one and not the other FAILs), and the H100 SXM row's (an H100 PCIe's id under the
    SXM's name FAILs)."""
    for path in run.glob("modern.*.json"):
        data = json.loads(path.read_text())
        data["system"]["gpus"][0]["pci_device_id"] = system
        forgery.monitor_inventory(data, pci_device_id=sampled)
        path.write_text(json.dumps(data))
    problems, applied = found(run)
    assert "device id check" not in applied
    if said is None:
        assert problems == []
    else:
        assert len(problems) == 7 and said in problems[0], problems


def test_an_inventory_naming_another_gpu_fails(run):
    forgery.edit_result(
        run, "modern.llm", lambda d: forgery.monitor_inventory(d, name="NVIDIA H200")
    )
    problems, _ = found(run)
    assert len(problems) == 1, problems
    assert (
        "gpu_monitor.inventory names NVIDIA H200 but system.gpus names NVIDIA H100" in (problems[0])
    )


@pytest.mark.parametrize(
    ("test", "factor", "said"),
    [
        (
            "modern.gemm",
            1.6,
            "efficiency.flops_per_example 625,000,000,000 but milarun's definition of a gemm "
            "example (10^12 FLOPs) gives 1,000,000,000,000",
        ),
        (
            "modern.llm",
            2.0,
            "efficiency.flops_per_example 3,657,185,280 but milarun's PaLM formula 6N + 12 L d "
            "s per token gives 7,314,370,560",
        ),
        ("modern.bert", 1.3, "but milarun's formula 3 x the matmuls + 3 to 3.5 x the attention"),
    ],
)
def test_flops_divided_by_the_factor_fail_against_milarun_s_flops(run, test, factor, said):
    forgery.scale(run, test, factor, log=True, energy=True, flops=True)
    problems, _ = found(run)
    assert said in problems[0], problems  # gemm x1.6 is also above the peak: both said


def test_gemm_beyond_the_peak_without_its_device_name_fails(run):
    """The device comes from the system record: removing efficiency.device_name (and the
    doctor record) leaves the datasheet peak in force."""
    forgery.scale(run, "modern.gemm", 1.6, log=True, derived=True, energy=True)
    forgery.edit_result(run, "modern.gemm", lambda d: d["efficiency"].pop("device_name"))
    (run / "doctor-active.json").unlink()
    problems, _ = found(run)
    assert len(problems) == 1
    assert "108% of the H100-SXM datasheet's dense peak (bf16 989.5 TFLOP/s)" in problems[0]


def test_an_efficiency_naming_another_device_fails(run):
    forgery.edit_result(
        run, "modern.llm", lambda d: d["efficiency"].update(device_name="NVIDIA B200")
    )
    problems, _ = found(run)
    assert problems == [
        "modern.llm.J0.0.20261128-011230-779674.json: efficiency.device_name 'NVIDIA B200' "
        "but system.gpus names 'NVIDIA H100 80GB HBM3'"
    ]


def test_a_result_renamed_against_the_run_s_system_record_fails(run):
    forgery.edit_result(run, "modern.gemm", lambda d: forgery.rename_gpu(d, "NVIDIA B200"))
    problems, _ = found(run)
    assert len(problems) == 1 and "but the run's system record (.sysinfo) names" in problems[0]


def test_the_monitor_s_memory_against_the_system_record_fails(run):
    forgery.edit_result(run, "modern.vit", lambda d: forgery.monitor_memory(d, 143_771.0))
    problems, _ = found(run)
    assert problems == [
        "modern.vit.J0.0.20261128-011437-440919.json: gpu_monitor samples a GPU of 143,771 "
        "MiB but system.gpus says 81,559 MiB"
    ]


def test_an_unknown_device_is_said_unbounded(run):
    """Renamed everywhere, the run's record too: nothing bounds it, and the line says so."""
    for path in run.glob("modern.*.json"):
        data = json.loads(path.read_text())
        forgery.rename_gpu(data, "Acme X1")
        path.write_text(json.dumps(data))
    (sysinfo,) = run.glob("*.sysinfo")
    kept = json.loads(sysinfo.read_text())
    kept["system"]["gpus"][0]["name"] = "Acme X1"
    sysinfo.write_text(json.dumps(kept))
    problems, said = found(run)
    assert problems == []
    assert said.endswith("not applied: no peak applied: unknown device Acme X1 (7)")


def test_energy_beyond_the_peak_per_board_watt_fails(run):
    """The joules divided (the monitor's samples and the record edited alike would need the
    power samples too): a busy GPU's power bound catches a small energy."""

    def drain(data):
        data["energy"]["joules"] /= 10
        data["energy"]["watts"] /= 10

    forgery.edit_result(run, "modern.llm", drain)
    problems, _ = found(run)
    assert any("not a busy device" in p for p in problems), problems


def test_an_idle_gpu_over_the_window_fails(run):
    """The monitor's utilisation made an idle GPU's: not the device that did the work."""

    def idle(data):
        for sample in data["gpu_monitor"]["samples"]:
            for reading in sample["gpus"].values():
                reading["load"] = 0.1

    forgery.edit_result(run, "modern.resnet50", idle)
    problems, _ = found(run)
    assert problems == [
        "modern.resnet50.J0.0.20261128-011401-808622.json: its GPU monitor reads a mean "
        "utilisation of 10% over the steady window, under 50%: not a busy device"
    ]


def test_an_argument_recorded_against_its_argv_fails(run):
    forgery.edit_result(run, "modern.bert", lambda d: d["call"]["arguments"].update(seq_len=256))
    problems, _ = found(run)
    assert problems == [
        "modern.bert.J0.0.20261128-011324-471536.json: call.arguments.seq_len 256 but its argv 512"
    ]


def test_verify_names_the_bounds_on_its_pass_line_and_a_tender_may_fail_unknown_devices(tmp_path):
    tender = rules.make_tender("modern", None, TenderRules(repeat=1, allow_overrides=True))
    path = rules.write_tender(tmp_path / "tender.json", tender)
    out = package.make_package(H100, tmp_path / "bid.tar.gz", path).out
    line = next(c for c in verify.verify(out, path).checks if c.rule == "evidence")
    assert line.ok and "FLOPs per example recomputed by milarun for 7" in line.evidence

    def unknown(folder: Path) -> None:
        for result in (folder / "run").glob("modern.*.json"):
            data = json.loads(result.read_text())
            forgery.rename_gpu(data, "Acme X1")
            result.write_text(json.dumps(data))
        for kept in (folder / "run").glob("*.sysinfo"):
            data = json.loads(kept.read_text())
            data["system"]["gpus"][0]["name"] = "Acme X1"
            kept.write_text(json.dumps(data))

    strict = rules.write_tender(tmp_path / "strict.json", {**tender, "unknown_device_fails": True})
    bad = bidkit.edited(out, tmp_path, unknown)
    line = next(c for c in verify.verify(bad, strict).checks if c.rule == "evidence")
    assert not line.ok
    said = "no peak applied: unknown device Acme X1: the tender bounds every device"
    assert said in line.evidence


@pytest.mark.slow
def test_the_counted_table_is_what_this_release_counts(tmp_path):
    """A real ResNet-50 step counted here (CPU, batch 2): FLOPs per example do not depend on
    the batch or the device, so this release's count is the table's figure for the H100."""
    out = tmp_path / "r50.json"
    done = milarun("run", "milabench.models.resnet50:main", "-o", out, "--",
                   "--batch-size", "2", "--min-slices", "5")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    view = ResultView.from_dict(json.loads(out.read_text()))
    expected = flops.expected(view)
    assert isinstance(expected, flops.Expected) and expected.how == flops.COUNTED_HOW
    assert view.efficiency is not None and view.efficiency.flops_per_example == expected.value


def test_the_counted_table_keys_every_entry_by_its_shape_arguments():
    """Each entry of the shipped table is found again from its own arguments plus the ones
    that change nothing counted (a batch, a run length): the lookup verify makes."""
    for function, entries in flops.counted().items():
        for shape, value in entries:
            args = {**shape, "batch_size": 3, "max_count": 10, "seed": 1, "lr": 0.1}
            view = ResultView.from_dict({"call": {"function": function, "arguments": args}})
            found = flops.expected(view)
            assert isinstance(found, flops.Expected), function
            assert value in (found.value, found.high), function  # BERT, ViT: a formula's end
            other = ResultView.from_dict(
                {"call": {"function": function, "arguments": {**args, "unheard_of": 1}}}
            )
            assert "other arguments than this release counted" in str(flops.expected(other))


def test_verify_names_the_release_and_fails_another_version(tmp_path):
    """The tender names the release that made it; a verify of another version FAILs (its
    FLOPs table and bounds are another release's)."""
    tender = rules.make_tender("modern", None, TenderRules(repeat=1, allow_overrides=True))
    assert tender["milarun_release"]["version"] == tender["milarun_version"]
    path = rules.write_tender(tmp_path / "tender.json", tender)
    out = package.make_package(H100, tmp_path / "bid.tar.gz", path).out
    line = next(c for c in verify.verify(out, path).checks if c.rule == "version")
    assert line.ok and line.evidence.startswith("every result ran milarun 0.1.0"), line
    other = {**tender, "milarun_release": {"version": "0.1.0", "commit": "f" * 40}}
    line = next(
        c
        for c in verify.verify(out, rules.write_tender(tmp_path / "c.json", other)).checks
        if c.rule == "version"
    )
    assert line.ok and "the tender names commit ffffffffffff, this verify runs" in line.evidence

    def newer(folder: Path) -> None:
        for result in (folder / "run").glob("modern.*.json"):
            data = json.loads(result.read_text())
            result.write_text(json.dumps({**data, "milarun_version": "0.2.0"}))

    later = {**tender, "milarun_version": "0.2.0", "milarun_release": {"version": "0.2.0"}}
    later_path = rules.write_tender(tmp_path / "later.json", later)
    bad = bidkit.edited(out, tmp_path, newer)
    line = next(c for c in verify.verify(bad, later_path).checks if c.rule == "version")
    assert not line.ok and line.evidence.startswith(
        "the tender names milarun 0.2.0 but this verify runs milarun 0.1.0"
    ), line


@pytest.mark.slow
def test_the_count_script_recounts_a_table_entry(tmp_path):
    """scripts/count-flops.py counts a real step of the 2020 toy regression (CPU, batches 1
    and 2, equal per example) and finds the shipped table's figure, under the same key."""
    table = tmp_path / "table.json"
    script = ROOT / "scripts" / "count-flops.py"
    done = subprocess.run(
        [sys.executable, script, "--profile", "standard", "--test", "toy_reg", "--table", table],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (entry,) = json.loads(table.read_text())["entries"]
    shipped = [v for k, v in flops.counted()[entry["function"]] if k == entry["arguments"]]
    assert shipped == [entry["flops_per_example"]] == [24.0]
