"""The recurrent tests' FLOPs per example, as milarun's formula gives them
(milarun.measure.flops_formulas): the counter cannot see the fused RNN kernels of cuDNN
or oneDNN, so wlm and translator record this formula instead of a counted step."""

from __future__ import annotations

from milarun.measure import flops_formulas
from milarun.measure.efficiency import Formula


def matmul_precision(name: str) -> str:
    """The precision a test's ``--precision`` runs its matmuls in: fp16 and bf16 under
    autocast, else fp32 (the peak that bounds the formula's FLOPs)."""
    return name if name in ("fp16", "bf16") else "fp32"


def word_lm(
    model: str, emsize: int, nhid: int, nlayers: int, vocabulary: int, bptt: int, precision: str
) -> Formula:
    """wlm's FLOPs per example (one column's bptt-long sequence)."""
    per_example = flops_formulas.word_lm_per_example(model, emsize, nhid, nlayers, vocabulary, bptt)
    return Formula(per_example, matmul_precision(precision), flops_formulas.WORD_LM)
