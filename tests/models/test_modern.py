"""The modern suite's tests (llm, bert, resnet50, vit, diffusion, llm-scaling, gemm) on the
CPU at the quick profile's tiny sizes: each trains through the real CLI, its loss is finite,
its FLOPs are counted (or computed, for the LLMs), its settings recorded, and a size that
cannot fit leaves an ``oom`` record. The CUDA-only paths (a CUDA OutOfMemoryError, a GPU's
memory, fp8) are tested through fakes at the boundary."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, cli_env
from milabench import modern
from milarun.measure import runner
from milarun.measure.experiment import DoesNotFit, Experiment
from milarun.run.plan import free_port
from milarun.run.profile import arguments_to_argv, load_profile
from modelrun import assert_rejected, describe, only_result, run_model

# oneDNN's AMX bf16 kernels can die with SIGILL on some virtual CPUs (the quick profile pins
# the same ISA through its exec_prefix).
ENV = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
SLICES = ["--min-slices", "5"]
PER_GPU = ["llm", "bert", "resnet50", "vit", "diffusion", "gemm"]
COUNTED = {"bert", "resnet50", "vit", "diffusion", "gemm"}
# vit also runs under --compile (torch.compile: inductor, a C++ compiler on the CPU), in the
# same process as its quick-size check: one model process fewer in the suite's time.
COMPILED = {"vit"}


def quick_argv(test: str) -> tuple[str, list[str]]:
    job = load_profile("quick").jobs[test]
    args = {k: v for k, v in job.arguments.items() if k != "--min-slices"}
    return job.experiment, arguments_to_argv(args)


def check_result(result: dict, test: str) -> None:
    assert result["success"], result["error"]
    assert result["synthetic_data"] is True
    metric = "checksum" if test == "gemm" else "loss"
    assert math.isfinite(result["metrics"][metric]), result["metrics"]
    eff = result["efficiency"]
    assert eff["flops_per_example"] > 0 and eff["achieved_flops"] > 0, eff
    assert eff["precision"] == "bf16", eff
    if test in COUNTED:
        assert eff["method"].startswith("counted"), eff
    else:
        assert eff["method"].startswith("formula: 6N"), eff
    settings = eff["settings"]
    assert settings["precision"] == "bf16" and settings["tf32"] is True
    assert settings["compile"] is (test in COMPILED)
    assert "float32_matmul_precision" in settings  # torch's own, beside the test's
    if test in ("llm", "bert", "vit", "diffusion", "llm-scaling"):
        assert settings["attention"] in ("flash (cpu)", "math"), settings
        assert "autocast" in settings["mixed_precision"] or "FSDP2" in settings["mixed_precision"]
    if test != "gemm":
        assert settings["optimizer"], settings
        assert result["call"]["arguments"]["workload"], result["call"]["arguments"]


@pytest.mark.slow
@pytest.mark.parametrize("test", PER_GPU)
def test_modern_model_trains_at_the_quick_size(test, tmp_path):
    experiment, argv = quick_argv(test)
    compiled = ["--compile"] if test in COMPILED else []
    done = run_model(
        "run", experiment, "-o", tmp_path, "--", *argv, *compiled, *SLICES, env=ENV
    )  # fmt: skip
    assert done.returncode == 0, describe(done)
    result = only_result(tmp_path)
    check_result(result, test)
    assert len(result["timings"]["train"]["rates"]) >= 5
    if compiled:
        check_compiled(result)
    if test == "gemm":
        metrics = result["metrics"]
        assert metrics["tflops_bf16"] > 0 and metrics["tflops_bf16_512x256x256"] > 0
        skipped = result["efficiency"]["settings"]["skipped"]
        assert set(skipped) == {"tf32", "fp8"} and "cpu" in skipped["fp8"]


@pytest.mark.slow
def test_llm_scaling_shards_with_fsdp2_over_two_ranks(tmp_path):
    experiment, argv = quick_argv("llm-scaling")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
         "-m", "milarun", "run", experiment, "-o", str(tmp_path), "--", *argv, *SLICES],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=cli_env({"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **ENV},
                    benches=False, keep_pythonpath=True),
    )  # fmt: skip
    assert done.returncode == 0, describe(done)
    result = only_result(tmp_path)  # rank 0 writes it
    check_result(result, "llm-scaling")
    assert result["metrics"]["world_size"] == 2
    assert {"train_0", "train_1"} <= set(result["timings"])
    settings = result["efficiency"]["settings"]
    assert (
        "2 ranks" in settings["fsdp"] and "fp32 sharded parameters" in (settings["mixed_precision"])
    )


@pytest.mark.slow
def test_a_size_that_cannot_fit_is_an_oom_record(tmp_path):
    # A 2^31-token vocabulary at width 65536: a 512 TiB embedding, refused at once by the
    # allocator (past any address space), so the test uses no memory.
    experiment, argv = quick_argv("llm")
    huge = ["--vocab", str(2**31), "--hidden", "65536", "--heads", "32", "--kv-heads", "4"]
    done = run_model(
        "run", experiment, "-o", tmp_path, "--experiment-name", "modern-24gb.llm", "--",
        *argv, *huge, *SLICES, env=ENV,
    )  # fmt: skip
    assert done.returncode == 1, describe(done)
    result = only_result(tmp_path)
    assert result["success"] is False
    failure = result["failure"]
    assert failure["kind"] == "oom", failure
    message = failure["message"]
    assert "width-65536 Llama at sequence 64, batch 4 does not fit" in message, message
    assert "host's RAM" in message and "the quick profile is sized for it" in message


def test_the_models_refuse_bad_shapes():
    assert_rejected("llm", ["--hidden", "60", "--heads", "8"], "not a multiple of --heads")
    assert_rejected("bert", ["--vocab", "50"], "--vocab 50")
    assert_rejected("resnet50", ["--image-size", "16"], "--image-size 16")
    assert_rejected("vit", ["--model", "resnet50"], "--model resnet50")
    assert_rejected("diffusion", ["--channels", "30,64"], "--channels 30")
    assert_rejected("gemm", ["--precisions", "fp4"], "--precisions fp4")


# -- fakes at the CUDA boundary ----------------------------------------------------------
class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError as the harness sees it: by its name."""


class FakeCuda:
    type = "cuda"


def test_fits_turns_a_cuda_oom_into_does_not_fit(monkeypatch):
    monkeypatch.setattr(modern, "device_memory", lambda device: (23.6, "cuda:0 (RTX 4090)"))
    exp = Experiment("modern.llm")
    with pytest.raises(DoesNotFit) as caught:
        with modern.fits(exp, "a 1.10B-parameter Llama at sequence 2048, batch 8", FakeCuda()):
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore")
    text = str(caught.value)
    assert text.startswith("modern.llm: a 1.10B-parameter Llama at sequence 2048, batch 8")
    assert "23.6 GiB of cuda:0" in text and "\n" not in text
    assert text.endswith("the modern-24gb profile is sized for it")


def test_the_profile_that_fits_a_device():
    assert modern.fitting_profile(79.1) == "modern"
    assert modern.fitting_profile(139.8) == "modern"
    assert modern.fitting_profile(23.6) == "modern-24gb"
    assert modern.fitting_profile(15.8) == "quick"
    assert modern.fitting_profile(500.0, "cpu") == "quick"


def test_a_size_too_big_for_its_own_profile_says_to_lower_the_batch(monkeypatch):
    monkeypatch.setattr(modern, "device_memory", lambda device: (79.1, "cuda:0 (H100)"))
    message = modern.oom_message(
        Experiment("modern.diffusion"), "a UNet", FakeCuda(), OutOfMemoryError("CUDA oom")
    )
    assert message.endswith("this is the profile sized for it: lower --batch-size")


def test_other_errors_go_through_fits():
    with pytest.raises(ValueError):
        with modern.fits(Experiment("x"), "size", torch.device("cpu")):
            raise ValueError("not memory")


@pytest.mark.parametrize(
    "error,kind",
    [
        (DoesNotFit("modern.llm: ... does not fit"), "oom"),
        (OutOfMemoryError("CUDA out of memory"), "oom"),  # a test without fits()
        (RuntimeError("other"), "exception"),
    ],
)
def test_the_runner_records_out_of_memory_as_oom(error, kind, tmp_path):
    def test(exp, argv):
        raise error

    ended = runner._call(test, Experiment("t", outdir=tmp_path), [], monitor_interval=60)
    assert ended.failure is not None and ended.failure.kind == kind
    assert str(error) in ended.failure.message


def test_attention_backend_names_the_kernel_torch_runs():
    cpu = torch.device("cpu")
    found = modern.attention_backend(cpu, heads=2, seq=16, head_dim=8, causal=True)
    assert found in ("flash (cpu)", "math")
    # Under a dispatch mode that sees no fused op (a backend torch lacks), it says math.
    assert modern.SDPA_OPS["_scaled_dot_product_flash_attention"] == "flash"


def check_compiled(result: dict) -> None:
    """--compile: the compile steps timed as ``compile`` and kept out of the rate log, the
    FLOPs counted on the eager twin."""
    settings = result["efficiency"]["settings"]
    assert settings["compile"] is True and settings["compile_seconds"] > 0
    # the compiler's cache in the data folder, and what the compile found there
    assert settings["compile_cache"].endswith("cache/torchinductor")
    use = settings["compile_cache_use"]
    assert use["hit"] + use["miss"] + use["bypass"] > 0
    assert use["warm"] is (use["hit"] > 0 and use["miss"] == 0)
    compiled = result["timings"]["compile"]
    assert compiled["duration"] == pytest.approx(settings["compile_seconds"], abs=1e-3)
    # the compile steps are not in the rate log: its first block is an ordinary step
    assert result["timings"]["train"]["warmup_time"] < compiled["duration"]
    assert result["efficiency"]["method"].startswith("counted")
    assert result["efficiency"]["flops_per_example"] > 0


@pytest.mark.parametrize(
    "capability,hip,expected",
    [
        ((9, 0), None, {"tf32": None, "fp8": None}),  # H100: both
        ((8, 9), None, {"tf32": None, "fp8": None}),  # L40S: FP8 from Ada on
        ((8, 0), None, {"tf32": None, "fp8": "FP8 needs compute capability 8.9+"}),  # A100
        ((7, 0), None, {"tf32": "TF32 needs", "fp8": "FP8 needs"}),  # V100
        ((9, 4), "6.2", {"tf32": None, "fp8": None}),  # MI300X under ROCm
    ],
)
def test_gemm_measures_the_precisions_the_gpu_has(monkeypatch, capability, hip, expected):
    """The CUDA boundary faked: torch.cuda's capability and torch.version.hip."""
    from milarun.experiment import precision_unavailable

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: capability)
    monkeypatch.setattr(torch.version, "hip", hip)
    assert precision_unavailable("bf16", FakeCuda()) is None
    for precision, why in expected.items():
        found = precision_unavailable(precision, FakeCuda())
        assert (found is None) if why is None else (found or "").startswith(why), found
