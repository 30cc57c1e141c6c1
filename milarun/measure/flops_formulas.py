"""FLOPs formulas of the recurrent tests: the FLOPs of one training step, per example, from
the test's shape alone. Used by the tests themselves (their ``efficiency``) and by
``verify`` (milarun.tender.flops), so the figure a bid records and the one milarun
recomputes are one function of the arguments.

Why a formula and not a counted step: torch's FlopCounterMode has no formula for the fused
RNN kernels (cuDNN's ``_cudnn_rnn`` on a GPU, oneDNN's ``mkldnn_rnn_layer`` for an LSTM on
the CPU), so a counted step of wlm or translator on a GPU sees only their linear layers,
and one on the CPU an LSTM's not at all: the count would depend on the device. translator's
FLOPs per pair depend on the lengths its batches pad to, drawn from the data: it records
their means over the run, which the formula reads.

The convention is the counter's: a matmul of m x k by k x n is 2 m k n FLOPs, and a training
step is 3 x its forward matmuls (the backward computes the input's and the weight's
gradients: two products of the same size). Element-wise work (gates, activations, losses)
counts nothing, as in the counter. A counted step of the same shapes where the counter sees
every matmul (a GRU's on the CPU, two LSTMCells; GNMT's LSTMs with oneDNN off) agrees within
2%: its first time step has no gradient for the initial state (tests/tender/test_flops_formulas.py).

No torch import: ``verify`` runs where torch is not installed.
"""

from __future__ import annotations

TRAIN_PASSES = 3  # forward + the backward's two products per matmul
WIKI2_VOCABULARY = 33_278  # WikiText-2's dictionary, <eos> included (datasets/wiki2.py)
RNN_GATES = {"GRU": 3, "LSTM": 4, "RNN_TANH": 1, "RNN_RELU": 1}
WORD_LM = "formula 3 x the RNN stack's and decoder's forward matmuls per token x bptt"
GNMT = "formula 3 x GNMT's forward matmuls at the recorded mean lengths per pair"
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


def gnmt_per_pair(
    hidden: int,
    layers: int,
    vocabulary: int,
    source: float,
    source_padded: float,
    target: float,
    cross: float,
) -> float:
    """translator's FLOPs per sentence pair, from the pairs' mean lengths over the run: real
    source tokens (the bidirectional first layer reads the packed sequence), padded source
    length S, padded target length T (the decoder's inputs) and S x T (the attention).
    Encoder: 2 LSTM(h, h) per real token, then LSTM(2h, h), layers - 2 LSTM(h, h) and the
    attention's key projection per padded token. Decoder per target token: LSTM(h, h), the
    query projection, layers - 1 LSTM(2h, h), the classifier over the vocabulary; the
    attention's scores and context, 2 S T h each."""
    h = hidden
    encoder = 2 * rnn_layer(4, h, h) * source
    encoder += (
        rnn_layer(4, 2 * h, h) + (layers - 2) * rnn_layer(4, h, h) + 2 * h * h
    ) * source_padded
    per_target = rnn_layer(4, h, h) + 2 * h * h + (layers - 1) * rnn_layer(4, 2 * h, h)
    decoder = (per_target + 2 * h * vocabulary) * target
    return float(TRAIN_PASSES * (encoder + decoder + 4 * h * cross))
