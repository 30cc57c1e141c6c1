"""wlm / wlmfp16: the PyTorch word_language_model example (an RNN language model) on WikiText-2.

RNNModel: word embedding -> dropout -> multi-layer GRU (``--model``; LSTM, RNN_TANH and
RNN_RELU too) -> dropout -> linear decoder over the vocabulary, weights optionally tied.
Training as in the example: the text is cut into ``--batch-size`` columns (batchify), each
step reads the next ``--bptt`` rows, predicts each next word (cross-entropy), clips the
gradient norm to ``--clip`` and applies plain SGD with ``--lr``; the hidden state carries
over from step to step, detached, and restarts at zero with each pass over the text.
The legacy defaults: GRU, emsize = nhid = 656, 2 layers, dropout 0.5, bptt 35, lr 20.

One example is one column's bptt-long sequence: a step trains ``--batch-size`` examples.
``wlmfp16`` is the same module with ``--precision`` (autocast and, for fp16, a GradScaler,
with gradients unscaled before clipping); the standard profile passes ``auto``. Under
mixed precision the vocabulary is padded to a multiple of 8, as the legacy fp16 run did.

Legacy counterparts: milarun/models/wlm/main.py and main_fp16_optimizer.py (mila-ao-2020-2),
with their ``loss.item()`` each step (a host sync, part of the measured work). Left:
torch.autocast + GradScaler for fp16 (legacy: apex's FP16 optimizer).
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from milabench import helpers, recurrent
from milabench.datasets import wiki2
from milarun.experiment import BadTestArguments, Experiment

RNN_TYPES = ("GRU", "LSTM", "RNN_TANH", "RNN_RELU")


class RNNModel(nn.Module):
    """Encoder embedding, recurrent stack, decoder to vocabulary logits."""

    def __init__(
        self,
        rnn_type: str,
        ntoken: int,
        ninp: int,
        nhid: int,
        nlayers: int,
        dropout: float = 0.5,
        tie_weights: bool = False,
    ):
        super().__init__()
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        inner_dropout = dropout if nlayers > 1 else 0.0  # between layers only
        if rnn_type in ("LSTM", "GRU"):
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=inner_dropout)
        else:
            self.rnn = nn.RNN(
                ninp, nhid, nlayers, nonlinearity=rnn_type[4:].lower(), dropout=inner_dropout
            )
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:  # "Using the Output Embedding to Improve Language Models"
            self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if not tie_weights:
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, tokens: torch.Tensor, hidden: Any) -> tuple[torch.Tensor, Any]:
        """(seq, batch) token ids -> (seq * batch, ntoken) logits and the new hidden state."""
        output, hidden = self.rnn(self.drop(self.encoder(tokens)), hidden)
        logits = self.decoder(self.drop(output))
        return logits.view(-1, logits.size(-1)), hidden

    def init_hidden(self, batch_size: int) -> Any:
        weight = self.decoder.bias
        zeros = weight.new_zeros(self.nlayers, batch_size, self.nhid)
        return (zeros, zeros.clone()) if self.rnn_type == "LSTM" else zeros


def detach(hidden: Any) -> Any:
    """The hidden state cut from its history (backpropagation stops at the step's start)."""
    if isinstance(hidden, torch.Tensor):
        return hidden.detach()
    return tuple(detach(h) for h in hidden)


def check_arguments(args: argparse.Namespace) -> None:
    problems = []
    if not 0 <= args.dropout < 1:
        problems.append(f"--dropout {args.dropout} (0 <= dropout < 1)")
    if args.lr <= 0:
        problems.append(f"--lr {args.lr} (> 0)")
    if args.clip <= 0:
        problems.append(f"--clip {args.clip} (> 0)")
    if args.tied and args.emsize != args.nhid:
        problems.append(f"--tied needs --emsize == --nhid (got {args.emsize}, {args.nhid})")
    helpers.reject(problems)


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=64)
    parser.add_argument("--model", default="GRU", choices=RNN_TYPES, help="recurrent cell")
    parser.add_argument(
        "--emsize", type=helpers.positive_int, default=656, help="word embedding size"
    )
    parser.add_argument(
        "--nhid", type=helpers.positive_int, default=656, help="hidden units per layer"
    )
    parser.add_argument("--nlayers", type=helpers.positive_int, default=2)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument(
        "--bptt",
        type=helpers.positive_int,
        default=35,
        help="sequence length (steps of backpropagation through time)",
    )
    parser.add_argument("--lr", type=float, default=20.0, help="SGD learning rate")
    parser.add_argument("--clip", type=float, default=0.25, help="gradient norm clip")
    parser.add_argument(
        "--tied",
        action="store_true",
        help="tie the embedding and decoder weights (needs emsize == nhid)",
    )
    helpers.add_precision_argument(parser)
    args = exp.parse_args(parser, argv)
    check_arguments(args)
    device = helpers.setup(exp, args)
    precision = helpers.Precision(device, args.precision)
    exp.arguments["precision_used"] = precision.name  # what "auto" resolved to

    corpus = wiki2.corpus(exp.dataroot, pad_to_multiple_of=1 if precision.dtype is None else 8)
    helpers.use_dataset(exp, wiki2.folder(exp.dataroot))
    train_data = wiki2.batchify(corpus.train, args.batch_size)
    if len(train_data) < 2:
        raise BadTestArguments(
            f"bad test argument: --batch-size {args.batch_size} needs at least "
            f"{2 * args.batch_size} training tokens; the data has {len(corpus.train)}"
        )
    train_data = train_data.to(device)
    ntokens = len(corpus.dictionary)
    exp.arguments["vocabulary"] = ntokens  # the decoder's width, which verify's formula reads

    with helpers.built_on(device):
        model = RNNModel(
            args.model, ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied
        ).to(device)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)  # p -= lr * grad
    state = {"row": 0, "hidden": model.init_hidden(args.batch_size)}

    def step() -> torch.Tensor:
        row = state["row"]
        if row >= len(train_data) - 1:  # a new pass over the text
            row, state["hidden"] = 0, model.init_hidden(args.batch_size)
        length = min(args.bptt, len(train_data) - 1 - row)
        inputs = train_data[row : row + length]
        targets = train_data[row + 1 : row + 1 + length].reshape(-1)
        state["row"] = row + length
        optimizer.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        with precision.autocast():
            logits, hidden = model(inputs, detach(state["hidden"]))
            loss = F.cross_entropy(logits, targets)
        state["hidden"] = hidden
        precision.backward(loss, optimizer, clip_norm=args.clip)
        loss.item()  # as legacy it.log(loss=loss.item()): a host sync per step
        return loss.detach()

    # The FLOPs by milarun's formula, not a counted step: the counter cannot see cuDNN's
    # fused GRU/LSTM kernel (nor oneDNN's LSTM on the CPU), so a count depends on the device.
    formula = recurrent.word_lm(
        args.model, args.emsize, args.nhid, args.nlayers, ntokens, args.bptt, precision.name
    )
    helpers.train(exp, step, args.batch_size, formula=formula)
