"""Inside the probe child: the silent-data-corruption fingerprint of one device.

A fixed, deterministic computation whose result a healthy device of a given model and
software stack reproduces bit for bit: a few SGD steps of a small two-layer MLP (ReLU, squared
error) and a long chain of GEMMs (each product normalised by its largest magnitude, so the
chain neither overflows nor vanishes), from inputs made on the host by a seeded generator.
Both results are hashed (SHA-256 of their float32 bytes). A device that computes wrong
without raising an error gives another hash than its siblings and than the reference kept
for its model and stack (milarun.doctor.active.judge_fingerprint judges them).

The same code runs on numpy arrays (a CPU slice's child, on the BLAS threads the parent gave
the slice: their count is part of the stack, as a BLAS may split a product by it) and torch
tensors (a GPU's child, deterministic algorithms, no TF32): only ``@``, ``*``, ``-``,
``abs``, ``max``, ``.T`` and comparisons.
``MILARUN_FINGERPRINT_FLIP`` (the tests' planted fault): the device label whose chain gets
one bit flipped halfway.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from milarun.machine.gpu import runtime_version
from milarun.machine.sysinfo import cpu_model

VERSION = 1  # of the computation: a reference is kept per version
SEED = 51
BATCH, IN, HIDDEN, OUT = 256, 128, 256, 64
STEPS, LEARNING_RATE = 8, 0.05 / BATCH  # gradients are sums over the batch
CHAIN_SIZE, LINKS = 256, 64
FLIP_ENV = "MILARUN_FINGERPRINT_FLIP"
FLIP_BIT = 12  # a mantissa bit of the first element: small, silent, and enough


def inputs() -> dict[str, np.ndarray]:
    """The computation's inputs, made on the host (float32), the same for every device."""
    rng = np.random.default_rng(SEED)

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    return {
        "x": normal(BATCH, IN),
        "y": normal(BATCH, OUT),
        "w1": normal(IN, HIDDEN, scale=IN**-0.5),
        "w2": normal(HIDDEN, OUT, scale=HIDDEN**-0.5),
        "chain": normal(CHAIN_SIZE, CHAIN_SIZE),
        "link": normal(CHAIN_SIZE, CHAIN_SIZE, scale=CHAIN_SIZE**-0.5),
    }


def train(x: Any, y: Any, w1: Any, w2: Any) -> tuple[Any, Any]:
    """STEPS of SGD on 0.5 * |relu(x w1) w2 - y|^2, gradients written out."""
    for _ in range(STEPS):
        h = x @ w1
        active = h > 0
        a = h * active
        err = a @ w2 - y
        g2 = a.T @ err
        g1 = x.T @ ((err @ w2.T) * active)
        w1 = w1 - LEARNING_RATE * g1
        w2 = w2 - LEARNING_RATE * g2
    return w1, w2


def chain(x: Any, link: Any, flip: Callable[[Any], Any] | None = None) -> Any:
    for k in range(LINKS):
        x = x @ link
        x = x / abs(x).max()
        if flip is not None and k == LINKS // 2:
            x = flip(x)
    return x


def flip_bit(values: np.ndarray) -> np.ndarray:
    out = np.array(values, dtype=np.float32, copy=True)
    out.reshape(-1).view(np.int32)[0] ^= 1 << FLIP_BIT
    return out


def _digest(*arrays: np.ndarray) -> str:
    sha = hashlib.sha256()
    for array in arrays:
        sha.update(np.ascontiguousarray(array, dtype=np.float32).tobytes())
    return sha.hexdigest()


def _result(trained: tuple[np.ndarray, ...], chained: np.ndarray, stack: str) -> dict[str, Any]:
    training, gemm_chain = _digest(*trained), _digest(chained)
    return {
        "fingerprint": hashlib.sha256((training + gemm_chain).encode()).hexdigest()[:16],
        "training": training[:16],
        "gemm_chain": gemm_chain[:16],
        "finite": bool(np.isfinite(chained).all() and all(np.isfinite(t).all() for t in trained)),
        "stack": stack,
        "version": VERSION,
    }


def _flip_here() -> bool:
    return bool(os.environ.get(FLIP_ENV)) and os.environ.get(FLIP_ENV) == os.environ.get(
        "MILARUN_DEVICE"
    )


def on_numpy() -> dict[str, Any]:
    """The fingerprint on this CPU slice (numpy on its BLAS)."""
    data = inputs()
    trained = train(data["x"], data["y"], data["w1"], data["w2"])
    chained = chain(data["chain"], data["link"], flip_bit if _flip_here() else None)
    threads = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or "?"
    stack = (
        f"{cpu_model()} | numpy {np.__version__} | {threads} BLAS threads | fingerprint v{VERSION}"
    )
    return _result(trained, chained, stack)


def on_torch(device: Any) -> dict[str, Any]:
    """The fingerprint on a torch device, deterministic kernels and no TF32."""
    import torch

    data = {k: torch.from_numpy(v).to(device) for k, v in inputs().items()}
    deterministic = torch.are_deterministic_algorithms_enabled()
    precision = torch.get_float32_matmul_precision()
    torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision("highest")
    try:

        def flip(x: Any) -> Any:
            return torch.from_numpy(flip_bit(x.cpu().numpy())).to(device)

        trained = train(data["x"], data["y"], data["w1"], data["w2"])
        chained = chain(data["chain"], data["link"], flip if _flip_here() else None)
        host = [t.cpu().numpy() for t in trained], chained.cpu().numpy()
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_float32_matmul_precision(precision)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        runtime = f"cuda {runtime_version(torch.version)}"
    else:
        name, runtime = cpu_model(), "cpu"
    stack = f"{name} | torch {torch.__version__} | {runtime} | fingerprint v{VERSION}"
    return _result(tuple(host[0]), host[1], stack)
