"""recom: Neural Collaborative Filtering (NeuMF, the MLPerf 0.5 recommendation model) on ML-20M.

Legacy counterpart: ``milarun/models/recommendation/ncf.py`` (+ ``neumf.py``, and the data
set ``milarun/datasets/ml20m/dataset.py``) at mila-ao-2020-2.

NeuMF joins a generalised matrix factorisation branch (user and item embeddings of
``--factors`` dims, multiplied element-wise) and an MLP branch (user and item embeddings of
half the first ``--layers`` size each, concatenated, then Linear+ReLU layers
256-256-128-64 by default); both feed one Linear to a single logit, trained with
BCEWithLogits and Adam (lr 5e-4, betas 0.9/0.999, eps 1e-8), initialised as the reference
(embeddings N(0, 0.01), Glorot-uniform MLP, LeCun-uniform output layer).

Examples, as in the legacy data loader (``ml20m.TrainingTriples``): the training positives
each followed by ``--negatives`` (4) negative slots, (1 + negatives) x positives (user,
item, label) triples, read in a new random order at each pass by ``--workers`` DataLoader
processes (pinned memory on CUDA). A negative slot's item is drawn on the CPU, one torch
draw at a time, uniformly among the items that are not one of its user's training
positives, when the slot is read. One example is one triple; a step trains
``--batch-size`` of them, its batch loaded inside the timed block, and reads the loss
(``loss.item()``) as the legacy loop did every step: a host sync, part of the measured
workload.

``--sampler gpu`` (in no shipped profile) draws the triples on the device inside the step
instead, without a loader (a negative is drawn at most 3 times; its label then says
whether the pair is a training positive): a different, lighter workload.

Differences left: a user's positives are looked up in a sorted array (legacy: a scipy
dok_matrix); the batches come from a permutation of the triples read in chunks (the legacy
``shuffle=True`` listed all 100M indices first) and only full batches are read.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

from milabench import helpers
from milabench.datasets import ml20m
from milarun.experiment import BadTestArguments, Experiment

DRAWS = 3  # draws of a negative item before taking it as it is


class NeuMF(nn.Module):
    """GMF and MLP branches over user/item embeddings, one logit per (user, item)."""

    def __init__(self, nb_users: int, nb_items: int, mf_dim: int, layers: list[int]):
        super().__init__()
        half = layers[0] // 2
        self.mf_user = nn.Embedding(nb_users, mf_dim)
        self.mf_item = nn.Embedding(nb_items, mf_dim)
        self.mlp_user = nn.Embedding(nb_users, half)
        self.mlp_item = nn.Embedding(nb_items, half)
        self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(layers, layers[1:]))
        self.final = nn.Linear(layers[-1] + mf_dim, 1)
        for embedding in (self.mf_user, self.mf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(embedding.weight, 0.0, 0.01)
        for layer in self.mlp:
            limit = math.sqrt(6.0 / (layer.in_features + layer.out_features))  # Glorot
            nn.init.uniform_(layer.weight, -limit, limit)
        limit = math.sqrt(3.0 / self.final.in_features)  # LeCun
        nn.init.uniform_(self.final.weight, -limit, limit)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        mf = self.mf_user(users) * self.mf_item(items)
        mlp = torch.cat((self.mlp_user(users), self.mlp_item(items)), dim=1)
        for layer in self.mlp:
            mlp = F.relu(layer(mlp))
        return self.final(torch.cat((mf, mlp), dim=1)).squeeze(1)


class TripleSampler:
    """``--sampler gpu``: (user, item, label) batches over the training positives and their
    negative slots, drawn on the device (a negative slot's item is redrawn up to DRAWS times
    in all while it is a training positive; its label says whether the final pair is)."""

    def __init__(self, data: ml20m.Ratings, negatives: int, device: torch.device):
        self.users = data.users.to(device)
        self.items = data.items.to(device)
        self.nb_items, self.slots, self.device = data.nb_items, 1 + negatives, device
        self.total = len(data) * self.slots
        # The positives as sorted keys user * nb_items + item, for membership tests.
        self.known = torch.unique(self.users * self.nb_items + self.items)  # sorted
        self.order = torch.randperm(self.total, device=device)
        self.position = 0

    def is_positive(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        keys = users * self.nb_items + items
        spot = torch.searchsorted(self.known, keys).clamp_(max=len(self.known) - 1)
        return self.known[spot] == keys

    def batch(self, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.position + size > self.total:  # a new pass, in a new order
            self.order = torch.randperm(self.total, device=self.device)
            self.position = 0
        slots = self.order[self.position : self.position + size]
        self.position += size
        positive, negative_slot = slots // self.slots, slots % self.slots != 0
        users, items = self.users[positive], self.items[positive]
        candidates = torch.randint(self.nb_items, (size,), device=self.device)
        for _ in range(DRAWS - 1):
            taken = self.is_positive(users, candidates)
            redraw = torch.randint(self.nb_items, (size,), device=self.device)
            candidates = torch.where(taken, redraw, candidates)
        items = torch.where(negative_slot, candidates, items)
        labels = self.is_positive(users, items).float()
        return users, items, labels


def parse_layers(text: str) -> list[int]:
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        layers = []
    if len(layers) < 1 or min(layers) < 1 or layers[0] % 2:
        raise BadTestArguments(
            f"bad test argument: --layers {text!r} (comma-separated sizes >= 1, the first one even)"
        )
    return layers


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--batch-size",
        type=helpers.positive_int,
        default=2048,
        help="(user, item, label) triples per step",
    )
    parser.add_argument(
        "-f", "--factors", type=helpers.positive_int, default=64, help="GMF embedding size"
    )
    parser.add_argument(
        "--layers",
        default="256,256,128,64",
        help="MLP sizes; the first is the two MLP embeddings together",
    )
    parser.add_argument("-l", "--lr", type=float, default=5e-4, help="Adam learning rate")
    parser.add_argument(
        "-n", "--negatives", type=int, default=4, help="negative triples per training positive"
    )
    parser.add_argument(
        "--sampler",
        choices=("cpu", "gpu"),
        default="cpu",
        help="cpu: the legacy dataset in DataLoader workers; gpu: triples "
        "drawn on the device inside the step (not the legacy workload)",
    )
    helpers.add_data_arguments(parser)
    args = exp.parse_args(parser, argv)
    layers = parse_layers(args.layers)
    if args.negatives < 0 or args.lr <= 0 or args.workers < 0:
        raise BadTestArguments(
            f"bad test argument: --negatives {args.negatives} (>= 0), "
            f"--lr {args.lr} (> 0), --workers {args.workers} (>= 0)"
        )
    device = helpers.setup(exp, args)

    data = ml20m.train_set(exp.dataroot)
    helpers.use_dataset(exp, ml20m.folder(exp.dataroot))
    triples = len(data) * (1 + args.negatives)
    if triples < args.batch_size:
        raise BadTestArguments(
            f"bad test argument: --batch-size {args.batch_size} is more than the "
            f"{triples} training triples of this data"
        )
    if args.sampler == "gpu":
        sampler = TripleSampler(data, args.negatives, device)

        def load() -> tuple[torch.Tensor, ...]:
            return sampler.batch(args.batch_size)
    else:
        dataset = ml20m.TrainingTriples(data, args.negatives)
        order = ml20m.ShuffledBatches(len(dataset), args.batch_size, seed=args.seed)
        batches = helpers.endless(
            helpers.data_loader(
                dataset, args.batch_size, args.workers, seed=args.seed, batch_sampler=order
            )
        )

        def load() -> tuple[torch.Tensor, ...]:
            users, items, labels = helpers.to_device(next(batches), device)
            return users, items, labels.view(-1)  # the legacy's (batch, 1) labels

    with helpers.built_on(device):
        model = NeuMF(data.nb_users, data.nb_items, args.factors, layers).to(device)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8)

    def step() -> float:
        users, items, labels = load()
        loss = F.binary_cross_entropy_with_logits(model(users, items), labels)
        value = loss.item()  # the legacy loop's per-step read (a sync)
        optimizer.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        loss.backward()
        optimizer.step()
        return value

    helpers.train(exp, step, args.batch_size)
