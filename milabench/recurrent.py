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


class PairLengths:
    """The lengths translator's steps saw, summed over the run: pairs, real and padded
    source tokens, padded target tokens (the decoder's inputs), padded S x T; their means
    per pair are what its FLOPs per pair depend on (recorded as the ``lengths`` argument)."""

    KEYS = ("source", "source_padded", "target", "cross")

    def __init__(self) -> None:
        self.pairs = 0
        self.sums = dict.fromkeys(self.KEYS, 0)

    def add(self, pairs: int, source: int, source_padded: int, target: int) -> None:
        """One batch: ``source`` real source tokens in all; each pair padded to
        ``source_padded`` and ``target`` tokens."""
        self.pairs += pairs
        for key, value in zip(
            self.KEYS,
            (source, pairs * source_padded, pairs * target, pairs * source_padded * target),
            strict=True,
        ):
            self.sums[key] += value

    def means(self) -> dict[str, float]:
        return {k: v / self.pairs for k, v in self.sums.items()} if self.pairs else {}


def gnmt(hidden: int, layers: int, vocabulary: int, lengths: dict[str, float]) -> Formula:
    """translator's FLOPs per sentence pair at the mean lengths its steps saw (fp32)."""
    per_pair = flops_formulas.gnmt_per_pair(hidden, layers, vocabulary, **lengths)
    return Formula(per_pair, "fp32", flops_formulas.GNMT)
