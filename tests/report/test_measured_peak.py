"""The measured peak: a gemm result of the same device gives each test a '% of measured peak'
beside the datasheet's (issue 25)."""

from __future__ import annotations

import math

import pytest

from milarun.report import measured_peak
from milarun.report.build import build_report
from milarun.report.render import html, text
from milarun.report.summary import summarize
from milarun.results.read import views
from resultfactory import result

H100 = "NVIDIA H100 80GB HBM3"
DIAGNOSTICS = {"train": {"slices": 20, "cv": 0.01, "drift": 0.0, "warmup": 0.0, "flags": []}}


def efficiency(achieved: float, precision: str = "bf16", device: str = H100) -> dict:
    return {
        "achieved_flops": achieved,
        "precision": precision,
        "device_name": device,
        "percent_of_peak": 100 * achieved / 989.5e12,
        "flops_per_example": 1e9,
    }


def gemm(device: str = H100, **metrics: float) -> dict:
    return result(
        "modern.gemm", "0.0", 700.0, metrics={"checksum": 1.0, **metrics},
        efficiency=efficiency(700e12, device=device), diagnostics=DIAGNOSTICS,
    )  # fmt: skip


def test_the_best_gemm_figure_per_device_and_precision_is_the_peak():
    runs = [
        gemm(tflops_bf16=700.0, tflops_bf16_16384x5632x2048=720.0, tflops_fp8=1300.0),
        gemm(tflops_bf16=650.0),
        gemm("NVIDIA H200", tflops_bf16=760.0),
        result("modern.llm", "0.0", 5000.0, metrics={"tflops_bf16": 9999.0}),  # not gemm
    ]
    peaks = measured_peak.measured_peaks(views(runs))
    assert peaks == {
        (H100, "bf16"): 720e12,
        (H100, "fp8"): 1300e12,
        ("NVIDIA H200", "bf16"): 760e12,
    }


def test_a_failed_gemm_or_another_device_gives_no_measured_peak():
    failed = gemm(tflops_bf16=700.0)
    failed["success"] = False
    assert measured_peak.measured_peaks(views([failed])) == {}
    llm = result("modern.llm", "0.0", 5000.0, efficiency=efficiency(360e12, device="NVIDIA B200"))
    assert measured_peak.percent_of_measured(views([llm])[0], {(H100, "bf16"): 720e12}) is None


def test_each_test_shows_percent_of_the_measured_peak():
    runs = [
        gemm(tflops_bf16=720.0),
        result(
            "modern.llm", "0.0", 5000.0, efficiency=efficiency(360e12), diagnostics=DIAGNOSTICS
        ),
        result(
            "modern.vit", "0.0", 900.0, efficiency=efficiency(1e12, "fp32"),
            diagnostics=DIAGNOSTICS,
        ),
    ]  # fmt: skip
    summary = summarize(runs)
    assert summary["modern.llm"]["quality"]["percent_of_measured_peak"] == pytest.approx(50.0)
    report = build_report(summary)
    quality = report.quality
    assert quality.loc["modern.llm", "percent_of_measured_peak"] == pytest.approx(50.0)
    # gemm against its own best shape says nothing of a workload: not given (issue 39)
    assert math.isnan(quality.loc["modern.gemm", "percent_of_measured_peak"])
    assert (
        quality.loc["modern.vit", "percent_of_measured_peak"]
        != quality.loc["modern.vit", "percent_of_measured_peak"]
    )  # NaN: no fp32 gemm figure
    shown = text.render(report, "text")
    assert "36% gemm 50%" in shown and "of the peak the gemm test measured" in shown
    page = html.to_html(report)
    assert "<th>% of gemm</th>" in page and "<td>50.0</td>" in page
