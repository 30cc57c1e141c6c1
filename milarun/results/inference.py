"""An inference test's fields of a result, read: the engine and how it ran (its comparison
key) from ``efficiency.settings``, and its latency figures from ``metrics``.

The writers are milabench.engines (llm-serve, vllm-offline) and milabench.models.llm_decode;
one example of an inference test is one output token, so its rate is output tokens/s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from milarun.results.parts import as_map, number, text

# Latency and goodput figures of llm-serve's metrics (milarun.measure.loadgen), in ms and %.
SERVE_FIGURES = (
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "goodput_percent",
)


@dataclass(frozen=True)
class InferenceRun:
    """What an inference result ran (engine, version, precision, lengths, concurrency) and
    what it measured beside its rate (``figures``: SERVE_FIGURES, and for llm-decode its
    headline batch's ``tpot_ms`` and ``mbu_percent``)."""

    engine: str
    engine_version: str | None
    precision: str | None
    kv_dtype: str | None
    input_len: float | None
    output_len: float | None
    concurrency: float | None  # llm-serve's concurrency, llm-decode's headline batch
    figures: Mapping[str, float]
    cuda_graphs: bool = False  # CUDA graphs (llm-decode --compile, an engine's own)

    @classmethod
    def from_result(cls, settings: Any, metrics: Mapping[str, Any]) -> InferenceRun | None:
        """None for a result that is no inference test (no ``engine`` in its settings)."""
        found = as_map(settings)
        engine = text(found.get("engine"))
        if engine is None:
            return None
        batch = number(found.get("batch_size"))
        concurrency = number(found.get("concurrency"))
        figures = {k: v for k in SERVE_FIGURES if (v := number(metrics.get(k))) is not None}
        if batch is not None:  # llm-decode: its headline batch's figures
            for name in ("tpot_ms", "mbu_percent"):
                value = number(metrics.get(f"{name}_b{int(batch)}"))
                if value is not None:
                    figures[name] = value
        return cls(
            engine,
            text(found.get("engine_version")),
            text(found.get("precision")),
            text(found.get("kv_dtype")),
            number(found.get("input_len")),
            number(found.get("output_len")),
            concurrency if concurrency is not None else batch,
            figures,
            found.get("cuda_graphs") is True,
        )

    def key(self) -> tuple[Any, ...]:
        """Like with like: two results of other keys are never one line of a report."""
        return (
            self.engine,
            self.engine_version,
            self.precision,
            self.kv_dtype,
            self.input_len,
            self.output_len,
            self.concurrency,
            self.cuda_graphs,
        )

    def describe(self) -> str:
        """The key in a few words: ``vllm 0.11.0 bf16 kv fp8 1024/256 x8 graphs``."""
        lengths = "/".join(
            f"{v:.0f}" if v is not None else "?" for v in (self.input_len, self.output_len)
        )
        parts = [self.engine, self.engine_version or "", self.precision or ""]
        if self.kv_dtype and self.kv_dtype != self.precision:
            parts.append(f"kv {self.kv_dtype}")
        parts.append(lengths)
        if self.concurrency is not None:
            parts.append(f"x{self.concurrency:.0f}")
        if self.cuda_graphs:
            parts.append("graphs")
        return " ".join(p for p in parts if p)
