"""translator: GNMT (the MLPerf rnn_translator) on WMT16 English -> German, BPE 32k.

Legacy counterpart: ``milarun/models/rnn_translator.py`` and ``milarun/models/seq2seq/``
(``data/sampler.py``, ``train/trainer.py``, ``models/``) at mila-ao-2020-2.

One embedding shared by source and target (one joint BPE vocabulary). Encoder: 4 LSTM
layers of 1024, the first bidirectional (over packed sequences), residual connections from
the third layer on. Decoder: an LSTM layer whose output queries a normalised Bahdanau
attention over the encoder outputs, then 3 LSTM layers fed [output, attention context]
(residual from the third decoder layer on), a linear classifier. Dropout 0.2 where the
reference puts it; teacher forcing; cross-entropy with label smoothing 0.1 summed over the
target tokens (PAD ignored) and divided by the batch size, Adam lr 5e-4, gradient norm
clipped to 5; pairs up to 50 tokens (with BOS/EOS) like the legacy training.

Batches as the legacy loader made them: ``--workers`` processes, the bucketing sampler
(:class:`BucketingSampler`: shards of 80 batches sorted by pair length, then the batches
shuffled), so a batch is padded to about its mean length, not to the longest of random
pairs (``--no-bucketing``: random batches, ~1.5-2x the LSTM steps). One example is one
sentence pair. As in the legacy loop, the next batch is fetched outside the timed block;
the copy to the device, the step and its ``loss.item()`` (read every step, a host sync that
is part of the measured workload) are inside it.

Differences left: the legacy ``--target-bleu`` (BLEU on newstest2014 after each epoch) is
gone: a run trains for ``--max-count`` pairs and never evaluates; no untimed warm-up step
on a batch of the longest pairs at each epoch start (the harness's first step is unsliced
warm-up instead); the order is drawn from ``--seed`` anew at each pass (legacy: seed 0, the
same order every pass); batches are in pinned memory on CUDA.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from milabench import helpers, recurrent
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

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, padding: torch.Tensor
    ) -> torch.Tensor:
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
            + [nn.LSTM(hidden, hidden) for _ in range(layers - 2)]
        )

    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """src (S, B), lengths (B,) on the CPU, decreasing -> outputs (S, B, H)."""
        packed, _ = self.layers[0](pack_padded_sequence(self.embedding(src), lengths))
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

    def forward(
        self, tgt: torch.Tensor, context: torch.Tensor, padding: torch.Tensor
    ) -> torch.Tensor:
        """tgt (T, B) teacher-forced inputs -> logits (T, B, vocabulary)."""
        x, _ = self.attention_lstm(self.embedding(tgt))
        attention = self.attention(x, context, padding)
        for i, lstm in enumerate(self.layers):  # dropout on x, not on the context
            y, _ = lstm(torch.cat([self.dropout(x), attention], dim=2))
            x = x + y if i > 0 else y
        return self.classifier(x)


class GNMT(nn.Module):
    def __init__(self, vocabulary: int, hidden: int = 1024, layers: int = 4, dropout: float = 0.2):
        super().__init__()
        embedding = nn.Embedding(vocabulary, hidden, padding_idx=wmt16.PAD)
        self.encoder = Encoder(embedding, hidden, layers, dropout)
        self.decoder = Decoder(embedding, hidden, layers, dropout)
        for name, p in self.named_parameters():
            if not name.endswith(("attention.gain", "attention.bias")):
                nn.init.uniform_(p, -INIT_RANGE, INIT_RANGE)

    def forward(self, src: torch.Tensor, lengths: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        context = self.encoder(src, lengths)
        return self.decoder(tgt, context, (src == wmt16.PAD).t())


class BucketingSampler:
    """GNMT's bucketing (the legacy ``seq2seq/data/sampler.py``), as a DataLoader
    ``batch_sampler``: at each pass, a random permutation cut to whole batches, split into
    shards of ``SHARD`` batches, each shard sorted by pair length (source + target tokens),
    cut into batches, and the batches shuffled. A batch then holds pairs of about the same
    length and is padded to about its mean. ``bucket=False``: random batches."""

    SHARD = 80  # batches per shard

    def __init__(self, lengths: Any, batch_size: int, seed: int = 0, bucket: bool = True):
        self.lengths, self.batch_size, self.bucket = torch.as_tensor(lengths), batch_size, bucket
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return len(self.lengths) // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(len(self.lengths), generator=self.generator)
        batches = order[: len(self) * self.batch_size].view(-1, self.batch_size)
        if self.bucket:
            shards = batches.flatten().split(self.SHARD * self.batch_size)
            by_length = [shard[self.lengths[shard].sort(stable=True).indices] for shard in shards]
            batches = torch.cat(by_length).view(-1, self.batch_size)
            batches = batches[torch.randperm(len(batches), generator=self.generator)]
        yield from batches.tolist()


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
        problems.append(
            f"--lr {args.lr}, --clip {args.clip} (> 0), --workers {args.workers} (>= 0)"
        )
    helpers.reject(problems)


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--batch-size", type=helpers.positive_int, default=64, help="sentence pairs per step"
    )
    parser.add_argument("--hidden-size", type=helpers.positive_int, default=1024)
    parser.add_argument(
        "--num-layers", type=int, default=4, help="LSTM layers of the encoder and of the decoder"
    )
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--smoothing", type=float, default=0.1, help="label smoothing")
    parser.add_argument("--clip", type=float, default=5.0, help="max gradient norm")
    parser.add_argument(
        "--max-length", type=int, default=50, help="longest pair kept, in tokens with BOS and EOS"
    )
    parser.add_argument(
        "--bucketing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="batches of pairs of about the same length (the legacy "
        "default; --no-bucketing: random batches)",
    )
    helpers.add_data_arguments(parser)
    args = exp.parse_args(parser, argv)
    check_arguments(args)
    device = helpers.setup(exp, args)

    data = wmt16.train_set(exp.dataroot, max_length=args.max_length)
    helpers.use_dataset(exp, wmt16.folder(exp.dataroot))
    order = BucketingSampler(data.lengths, args.batch_size, args.seed, args.bucketing)
    batches = helpers.endless(
        helpers.data_loader(
            data,
            args.batch_size,
            args.workers,
            collate_fn=wmt16.collate,
            seed=args.seed,
            batch_sampler=order,
        )
    )
    with helpers.built_on(device):
        model = GNMT(len(data.tokenizer), args.hidden_size, args.num_layers, args.dropout)
    model.to(device).train()
    criterion = nn.CrossEntropyLoss(
        ignore_index=wmt16.PAD, label_smoothing=args.smoothing, reduction="sum"
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    seen = recurrent.PairLengths()  # what the FLOPs per pair depend on
    exp.arguments["vocabulary"] = len(data.tokenizer)  # the classifier's width

    def step(batch: tuple[torch.Tensor, ...]) -> float:
        src, lengths, tgt = batch  # lengths stay on the CPU for packing
        seen.add(src.shape[1], int(lengths.sum()), src.shape[0], tgt.shape[0] - 1)
        tokens = int((tgt[1:] != wmt16.PAD).sum())
        src, tgt = helpers.to_device((src, tgt), device)
        logits = model(src, lengths, tgt[:-1])
        loss = criterion(logits.flatten(0, 1), tgt[1:].flatten())
        total = loss.item()  # the legacy loop's per-step read (a sync)
        optimizer.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        (loss / src.shape[1]).backward()  # per sentence, as the legacy trainer
        nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        return total / tokens  # per target token, as the legacy loop logged it

    def formula() -> recurrent.Formula:
        """milarun's formula at the lengths the steps saw (the counter cannot see cuDNN's or
        oneDNN's LSTM kernels), the lengths recorded for verify to recompute it."""
        exp.arguments["lengths"] = seen.means()
        return recurrent.gnmt(
            args.hidden_size, args.num_layers, len(data.tokenizer), exp.arguments["lengths"]
        )

    helpers.train(exp, step, args.batch_size, fetch=lambda: next(batches), formula=formula)
