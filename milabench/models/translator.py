"""translator: GNMT (the MLPerf rnn_translator) on WMT16 English -> German, BPE 32k.

One embedding shared by source and target (one joint BPE vocabulary). Encoder: 4 LSTM
layers of 1024, the first bidirectional (over packed sequences), residual connections from
the third layer on. Decoder: an LSTM layer whose output queries a normalised Bahdanau
attention over the encoder outputs, then 3 LSTM layers fed [output, attention context]
(residual from the third decoder layer on), a linear classifier. Dropout 0.2; teacher
forcing; cross-entropy with label smoothing 0.1 (PAD ignored), Adam lr 5e-4, gradient norm
clipped to 5; pairs up to 50 tokens (with BOS/EOS) like the legacy training.

One example is one sentence pair; each timed step includes loading its batch. The legacy
``--target-bleu`` (BLEU on newstest2014 after each epoch) is gone: a run trains for
``--max-count`` pairs and never evaluates, so nothing but training is timed.
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from milabench import helpers
from milabench.datasets import wmt16
from milarun.experiment import Experiment

INIT_RANGE = 0.1  # GNMT: every weight uniform in [-0.1, 0.1]


class BahdanauAttention(nn.Module):
    """score(q, k) = g * v/|v| . tanh(Wq q + Wk k + b): additive attention with the weight
    normalisation of GNMT (Salimans & Kingma); the context is the weighted encoder outputs."""

    def __init__(self, size: int):
        super().__init__()
        self.query = nn.Linear(size, size, bias=False)
        self.key = nn.Linear(size, size, bias=False)
        self.v = nn.Parameter(torch.empty(size))
        self.gain = nn.Parameter(torch.tensor(1 / math.sqrt(size)))
        self.bias = nn.Parameter(torch.zeros(size))

    def forward(self, query: torch.Tensor, keys: torch.Tensor,
                padding: torch.Tensor) -> torch.Tensor:
        """query (T, B, H), keys (S, B, H), padding (B, S) True at PAD -> context (T, B, H)."""
        q = self.query(query).transpose(0, 1).unsqueeze(2)  # B, T, 1, H
        k = self.key(keys).transpose(0, 1).unsqueeze(1)  # B, 1, S, H
        v = self.v * (self.gain / self.v.norm())
        scores = torch.tanh(q + k + self.bias) @ v  # B, T, S
        scores = scores.masked_fill(padding.unsqueeze(1), torch.finfo(scores.dtype).min)
        context = torch.softmax(scores, dim=-1) @ keys.transpose(0, 1)  # B, T, H
        return context.transpose(0, 1)


class Encoder(nn.Module):
    def __init__(self, embedding: nn.Embedding, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.embedding = embedding
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            [nn.LSTM(hidden, hidden, bidirectional=True), nn.LSTM(2 * hidden, hidden)]
            + [nn.LSTM(hidden, hidden) for _ in range(layers - 2)])

    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """src (S, B), lengths (B,) on the CPU, decreasing -> outputs (S, B, H)."""
        x = self.dropout(self.embedding(src))
        packed, _ = self.layers[0](pack_padded_sequence(x, lengths))
        x, _ = pad_packed_sequence(packed, total_length=src.shape[0])
        x, _ = self.layers[1](self.dropout(x))
        for lstm in self.layers[2:]:
            y, _ = lstm(self.dropout(x))
            x = x + y
        return x


class Decoder(nn.Module):
    def __init__(self, embedding: nn.Embedding, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.embedding = embedding
        self.dropout = nn.Dropout(dropout)
        self.attention_lstm = nn.LSTM(hidden, hidden)
        self.attention = BahdanauAttention(hidden)
        self.layers = nn.ModuleList(nn.LSTM(2 * hidden, hidden) for _ in range(layers - 1))
        self.classifier = nn.Linear(hidden, embedding.num_embeddings)

    def forward(self, tgt: torch.Tensor, context: torch.Tensor,
                padding: torch.Tensor) -> torch.Tensor:
        """tgt (T, B) teacher-forced inputs -> logits (T, B, vocabulary)."""
        x, _ = self.attention_lstm(self.embedding(tgt))
        x = self.dropout(x)
        attention = self.attention(x, context, padding)
        for i, lstm in enumerate(self.layers):
            y, _ = lstm(self.dropout(torch.cat([x, attention], dim=2)))
            x = x + y if i > 0 else y
        return self.classifier(x)


class GNMT(nn.Module):
    def __init__(self, vocabulary: int, hidden: int = 1024, layers: int = 4,
                 dropout: float = 0.2):
        super().__init__()
        embedding = nn.Embedding(vocabulary, hidden, padding_idx=wmt16.PAD)
        self.encoder = Encoder(embedding, hidden, layers, dropout)
        self.decoder = Decoder(embedding, hidden, layers, dropout)
        for name, p in self.named_parameters():
            if not name.endswith(("attention.gain", "attention.bias")):
                nn.init.uniform_(p, -INIT_RANGE, INIT_RANGE)

    def forward(self, src: torch.Tensor, lengths: torch.Tensor,
                tgt: torch.Tensor) -> torch.Tensor:
        context = self.encoder(src, lengths)
        return self.decoder(tgt, context, (src == wmt16.PAD).t())


def check_arguments(args: argparse.Namespace) -> None:
    """BadTestArguments naming every bad value, in one line."""
    problems = []
    if args.num_layers < 2:
        problems.append(f"--num-layers {args.num_layers} (>= 2: bidirectional + one more)")
    if args.max_length < 3:
        problems.append(f"--max-length {args.max_length} (>= 3: BOS, a token, EOS)")
    if not 0 <= args.dropout < 1:
        problems.append(f"--dropout {args.dropout} (in [0, 1))")
    if not 0 <= args.smoothing < 1:
        problems.append(f"--smoothing {args.smoothing} (in [0, 1))")
    if args.lr <= 0 or args.clip <= 0 or args.workers < 0:
        problems.append(f"--lr {args.lr}, --clip {args.clip} (> 0), --workers {args.workers}"
                        " (>= 0)")
    helpers.reject(problems)


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=helpers.positive_int, default=64,
                        help="sentence pairs per step")
    parser.add_argument("--hidden-size", type=helpers.positive_int, default=1024)
    parser.add_argument("--num-layers", type=int, default=4,
                        help="LSTM layers of the encoder and of the decoder")
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--smoothing", type=float, default=0.1, help="label smoothing")
    parser.add_argument("--clip", type=float, default=5.0, help="max gradient norm")
    parser.add_argument("--max-length", type=int, default=50,
                        help="longest pair kept, in tokens with BOS and EOS")
    helpers.add_data_arguments(parser)
    args = exp.parse_args(parser, argv)
    check_arguments(args)
    device = helpers.setup(exp, args)

    data = wmt16.train_set(exp.dataroot, max_length=args.max_length)
    helpers.use_dataset(exp, wmt16.folder(exp.dataroot))
    batches = helpers.endless(helpers.data_loader(
        data, args.batch_size, args.workers, collate_fn=wmt16.collate, seed=args.seed))
    model = GNMT(len(data.tokenizer), args.hidden_size, args.num_layers, args.dropout)
    model.to(device).train()
    criterion = nn.CrossEntropyLoss(ignore_index=wmt16.PAD, label_smoothing=args.smoothing)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def step() -> torch.Tensor:
        src, lengths, tgt = next(batches)  # lengths stay on the CPU for packing
        src, tgt = helpers.to_device((src, tgt), device)
        logits = model(src, lengths, tgt[:-1])
        loss = criterion(logits.flatten(0, 1), tgt[1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        return loss.detach()  # mean per target token

    helpers.train(exp, step, args.batch_size)
