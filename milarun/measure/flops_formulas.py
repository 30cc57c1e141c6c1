"""FLOPs formulas of the recurrent tests: the FLOPs of one training step, per example, from
the test's shape alone. Used by the tests themselves (their ``efficiency``) and by
``verify`` (milarun.tender.flops), so the figure a bid records and the one milarun
recomputes are one function of the arguments.

Why a formula and not a counted step: torch's FlopCounterMode has no formula for the fused
RNN kernels (cuDNN's ``_cudnn_rnn`` on a GPU, oneDNN's ``mkldnn_rnn_layer`` for an LSTM on
the CPU), so a counted step of wlm or translator on a GPU sees only their linear layers,
and one on the CPU an LSTM's not at all: the count would depend on the device.

The convention is the counter's: a matmul of m x k by k x n is 2 m k n FLOPs, and a training
step is 3 x its forward matmuls (the backward computes the input's and the weight's
gradients: two products of the same size). Element-wise work (gates, activations, losses)
counts nothing, as in the counter. A counted step of the same shapes where the counter sees
every matmul (a GRU's on the CPU, two LSTMCells) agrees within 1%: its first time step
has no gradient for the detached initial state (tests/measure/test_flops_formulas.py).

No torch import: ``verify`` runs where torch is not installed.
"""

from __future__ import annotations

TRAIN_PASSES = 3  # forward + the backward's two products per matmul
WIKI2_VOCABULARY = 33_278  # WikiText-2's dictionary, <eos> included (datasets/wiki2.py)
RNN_GATES = {"GRU": 3, "LSTM": 4, "RNN_TANH": 1, "RNN_RELU": 1}
WORD_LM = "formula 3 x the RNN stack's and decoder's forward matmuls per token x bptt"
SINE_WAVE = "formula 3 x the LSTMCells' and linear's forward matmuls per value x seq_len"


def rnn_layer(gates: int, inputs: int, hidden: int) -> int:
    """Forward FLOPs per token of one recurrent layer: input and hidden projections."""
    return 2 * gates * hidden * (inputs + hidden)


def word_lm_per_token(model: str, emsize: int, nhid: int, nlayers: int, vocabulary: int) -> int:
    """wlm's training FLOPs per token: the RNN stack (emsize in, nhid wide) and the decoder
    to ``vocabulary`` logits (the embedding is a lookup: no FLOPs)."""
    gates = RNN_GATES[model]
    stack = sum(rnn_layer(gates, emsize if i == 0 else nhid, nhid) for i in range(nlayers))
    return TRAIN_PASSES * (stack + 2 * nhid * vocabulary)


def word_lm_per_example(
    model: str, emsize: int, nhid: int, nlayers: int, vocabulary: int, bptt: int
) -> float:
    """wlm's FLOPs per example: one column's ``bptt``-long sequence (a full window)."""
    return float(bptt * word_lm_per_token(model, emsize, nhid, nlayers, vocabulary))


def sine_wave_per_example(samples: int, held_out: int, seq_len: int, hidden: int) -> float:
    """toy_lstm's FLOPs per counted example: each step trains ``samples - held_out`` waves of
    ``seq_len`` values through LSTMCell(1, h), LSTMCell(h, h) and Linear(h, 1), and counts
    ``samples`` examples (the legacy count)."""
    per_value = TRAIN_PASSES * (rnn_layer(4, 1, hidden) + rnn_layer(4, hidden, hidden) + 2 * hidden)
    return float(per_value * seq_len * (samples - held_out) / samples)
