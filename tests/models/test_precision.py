"""``--precision auto`` on a CPU: the half precision it runs natively, else fp32 (issue 39:
oneDNN's "bf16 supported" is true on every AVX-512 CPU, where bf16 is emulated and many
times slower)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from milabench import helpers

# Read here from the kernel, not from torch: the test does not trust what it tests.
FLAGS = set(Path("/proc/cpuinfo").read_text().split())


def test_auto_on_this_cpu_is_its_native_half_precision(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    expected = (
        "bf16" if FLAGS & {"avx512_bf16", "amx_bf16"} else "fp16" if "amx_fp16" in FLAGS else "fp32"
    )
    assert helpers.Precision(torch.device("cpu"), "auto").name == expected


@pytest.mark.parametrize("cap", ["AVX512_CORE", "AVX2", "avx512_core_vnni"])
def test_auto_under_an_isa_cap_without_bf16_runs_fp32(monkeypatch, cap):
    """The path of a CPU without native bf16 (an Intel Xeon without avx512_bf16 or AMX),
    taken on any CPU by capping oneDNN's instructions below bf16's."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    precision = helpers.Precision(torch.device("cpu"), "auto")
    assert precision.name == "fp32" and precision.dtype is None and precision.scaler is None
    assert not helpers.cpu_native("bf16") and not helpers.cpu_native("fp16")


def test_a_cap_that_keeps_bf16_keeps_it_where_the_cpu_has_it(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    assert helpers.cpu_native("bf16") == bool(FLAGS & {"avx512_bf16", "amx_bf16"})
    assert helpers.cpu_native("fp32")
