"""WikiText-2 and MovieLens-20M (synthesized, read back by their loaders) and the wlm and
recom tests.

The models run through the real ``milarun run`` CLI on tiny synthetic data with one torch
thread (like one CPU slice). fp16 autocast on a CPU without fp16 arithmetic is emulated and
about 5x slower, so the fp16 run trains fewer examples.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from milabench import datasets
from milabench.datasets import ml20m, wiki2
from modelrun import assert_rejected, run_trained, run_without_data

WIKI_SIZE = 20_000  # training tokens
ML_USERS = 60
# Each run trains for 6 slices of 0.5 s, however fast this machine is.
WLM_ARGS = ["--emsize", "32", "--nhid", "32", "--batch-size", "8", "--bptt", "20"]
WLM_FP32_ARGS = [*WLM_ARGS, "--min-slices", "6"]
WLM_FP16_ARGS = [*WLM_ARGS, "--precision", "fp16", "--min-slices", "6"]
# The legacy NeuMF (256-256-128-64, 64 factors), its triples read by 2 loader workers.
RECOM_ARGS = ["--batch-size", "512", "--workers", "2", "--min-slices", "6"]


# Every test here on one worker, in a row: the data below is synthesized once.
pytestmark = pytest.mark.xdist_group(name="text_recom")


@pytest.fixture(scope="module")
def dataroot(tmp_path_factory) -> Path:
    """Both datasets, tiny, synthesized once for this module."""
    root = tmp_path_factory.mktemp("text-recom-data")
    wiki2.synthesize(root, WIKI_SIZE, seed=0, workers=2)
    ml20m.synthesize(root, ML_USERS, seed=0, workers=2)
    return root


# -- WikiText-2 -------------------------------------------------------------------------------
def test_wiki2_layout_and_text_form(dataroot):
    base = dataroot / "wikitext-2"
    assert sorted(p.name for p in base.iterdir()) == [
        ".milarun-dataset.json",
        "wiki.test.tokens",
        "wiki.train.tokens",
        "wiki.valid.tokens",
    ]
    lines = (base / "wiki.train.tokens").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""  # every line ends with a newline
    lines = lines[:-1]
    assert lines[:3][0] == " " and lines[1].startswith(" = ") and lines[1].endswith(" = ")
    assert all(line.startswith(" ") and line.endswith(" ") for line in lines)
    assert any(line.startswith(" = = ") for line in lines)  # section headings
    assert 0.2 < sum(line == " " for line in lines) / len(lines) < 0.6  # blank lines
    # Exactly `size` training tokens as the corpus counts them (words + one <eos> a line).
    words = sum(len(line.split()) + 1 for line in lines)
    assert words == WIKI_SIZE
    assert datasets.is_synthetic(base) is True


def test_wiki2_corpus(dataroot):
    import torch

    corpus = wiki2.corpus(dataroot)
    assert [len(corpus.train), len(corpus.valid), len(corpus.test)] == [
        WIKI_SIZE,
        WIKI_SIZE // 10,
        WIKI_SIZE // 10,
    ]
    assert corpus.train.dtype == torch.long
    vocab = corpus.dictionary
    assert len(vocab) == int(torch.cat([corpus.train, corpus.valid, corpus.test]).max()) + 1
    assert vocab.idx2word[int(corpus.train[0])] == "<eos>"  # the file opens on a blank line
    assert {"<unk>", "the", ",", ".", "=", "<eos>"} <= set(vocab.word2idx)
    # Zipf: the most frequent words are the common ones; hundreds of rarer ones appear.
    counts = torch.bincount(corpus.train, minlength=len(vocab))
    top = {vocab.idx2word[i] for i in counts.argsort(descending=True)[:8].tolist()}
    assert {"the", "."} <= top
    assert len(vocab) > 2000
    padded = wiki2.corpus(dataroot, pad_to_multiple_of=8)
    assert len(padded.dictionary) % 8 == 0 and len(padded.dictionary) - len(vocab) < 8
    assert torch.equal(padded.train, corpus.train)


def test_wiki2_batchify():
    import torch

    data = torch.arange(26)
    batches = wiki2.batchify(data, 4)
    assert batches.shape == (6, 4) and batches.is_contiguous()
    assert batches[:, 0].tolist() == [0, 1, 2, 3, 4, 5]  # a column is a stretch of text
    assert batches[0].tolist() == [0, 6, 12, 18]  # 24 and 25 do not fill a row: dropped


def test_wiki2_download_extracts_the_token_files(tmp_path, monkeypatch):
    """The real-data path on a stand-in for the legacy zip (no network)."""
    import zipfile

    source = wiki2.synthesize(tmp_path / "source", 800, seed=0)
    fetched = []

    def fake_fetch(url: str, dest: Path, md5: str | None = None) -> Path:
        fetched.append((url, md5))
        dest.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(dest, "w") as zf:
            for name in ("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens"):
                zf.write(source / name, f"wikitext-2/{name}")
        return dest

    monkeypatch.setattr(datasets, "fetch", fake_fetch)
    base = wiki2.download(tmp_path / "real")
    assert fetched == [(wiki2.URLS[0], wiki2.MD5)]
    assert sorted(p.name for p in base.iterdir()) == [
        ".milarun-dataset.json",
        "wiki.test.tokens",
        "wiki.train.tokens",
        "wiki.valid.tokens",
    ]
    assert datasets.is_synthetic(base) is False
    assert len(wiki2.corpus(tmp_path / "real").train) == 800
    assert wiki2.synthesize(tmp_path / "real", 100) == base  # the real data satisfies it


# -- MovieLens-20M ----------------------------------------------------------------------------
def read_tsv(path: Path) -> list[list[int]]:
    return [[int(x) for x in line.split("\t")] for line in path.read_text().splitlines()]


def test_ml20m_layout_and_formats(dataroot):
    base = dataroot / "ml-20m"
    assert sorted(p.name for p in base.iterdir()) == [
        ".milarun-dataset.json",
        "ratings.csv",
        "test-negative.csv",
        "test-ratings.csv",
        "train-ratings.csv",
    ]
    raw = (base / "ratings.csv").read_text().splitlines()
    assert raw[0] == "userId,movieId,rating,timestamp"
    user, movie, stars, stamp = raw[1].split(",")
    assert user == "1" and float(stars) * 2 == int(float(stars) * 2) and int(stamp) > 7e8
    train, test = read_tsv(base / "train-ratings.csv"), read_tsv(base / "test-ratings.csv")
    negatives = read_tsv(base / "test-negative.csv")
    assert all(len(row) == 3 and row[2] == 1 for row in train + test)
    assert [row[0] for row in test] == list(range(ML_USERS))  # one per user, in order
    assert len(negatives) == ML_USERS and {len(row) for row in negatives} == {999}
    assert len(train) + len(test) == len(raw) - 1  # every user kept (>= 20 ratings each)
    assert datasets.is_synthetic(base) is True


def test_ml20m_split_and_negatives(dataroot):
    import numpy as np

    data = ml20m.train_set(dataroot)
    positives, negatives = ml20m.evaluation_set(dataroot)
    assert data.nb_users == ML_USERS and positives.shape == (ML_USERS, 2)
    assert negatives.shape == (ML_USERS, 999)
    users, items = data.users.numpy(), data.items.numpy()
    assert np.bincount(users).min() >= ml20m.MIN_RATINGS - 1  # the held-out one aside
    # Contiguous 0-based item ids; every item is in the train or the test positives.
    assert set(items) | set(positives[:, 1]) == set(range(data.nb_items))
    for user, held_out in positives:
        rated = set(items[users == user])
        assert held_out not in rated
        assert not rated & set(negatives[user]) and held_out not in negatives[user]
    # Power-law popularity: the top 10% of items hold far more than 10% of the ratings.
    counts = np.sort(np.bincount(items, minlength=data.nb_items))[::-1]
    assert counts[: data.nb_items // 10].sum() > 0.3 * counts.sum()


def test_ml20m_convert_semantics(tmp_path):
    """The NCF conversion on hand-made ratings: filter, id mapping, hold-out, negatives."""
    rows = ["userId,movieId,rating,timestamp"]
    rows += [f"10,{100 + k},4.0,{1000 + (k * 7) % 20}" for k in range(20)]  # last: k=17
    rows += [f"7,{100 + k},3.0,{2000 + k}" for k in range(19)]  # 19 ratings: dropped
    rows += [f"3,{110 + k},2.5,{3000 + min(k, 18)}" for k in range(20)]  # tie: 128 and 129
    base = tmp_path / "ml-20m"
    base.mkdir()
    (base / "ratings.csv").write_text("\n".join(rows) + "\n")
    info = ml20m.convert(base, seed=0)
    assert info == {"users": 2, "items": 30, "ratings": 40}
    train, test = read_tsv(base / "train-ratings.csv"), read_tsv(base / "test-ratings.csv")
    # Users in order of first appearance (10 -> 0, 3 -> 1); items too (movie 100 + k -> k).
    assert test == [[0, 17, 1], [1, 29, 1]]  # the latest rating; a tie goes to the file's last
    user0 = [item for user, item, _ in train if user == 0]
    assert user0 == sorted(set(range(20)) - {17}, key=lambda k: (k * 7) % 20)  # time order
    assert [item for user, item, _ in train if user == 1] == list(range(10, 29))
    negatives = read_tsv(base / "test-negative.csv")
    assert set(negatives[0]) == set(range(20, 30))  # uniform over the 10 unrated items
    assert set(negatives[1]) == set(range(10))


def test_ml20m_download_converts_the_archive(tmp_path, monkeypatch):
    """The real-data path on a stand-in for ml-20m.zip (no network)."""
    import zipfile

    source = ml20m.synthesize(tmp_path / "source", 12, seed=0)

    def fake_fetch(url: str, dest: Path, md5: str | None = None) -> Path:
        assert (url, md5) == (ml20m.URL, ml20m.MD5)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(dest, "w") as zf:
            zf.write(source / "ratings.csv", "ml-20m/ratings.csv")
            zf.writestr("ml-20m/movies.csv", "movieId,title,genres\n")
        return dest

    monkeypatch.setattr(datasets, "fetch", fake_fetch)
    base = ml20m.download(tmp_path / "real")
    assert sorted(p.name for p in base.iterdir()) == [
        ".milarun-dataset.json",
        "movies.csv",
        "ratings.csv",
        "test-negative.csv",
        "test-ratings.csv",
        "train-ratings.csv",
    ]
    assert datasets.is_synthetic(base) is False
    for name in ("train-ratings.csv", "test-ratings.csv", "test-negative.csv"):
        assert (base / name).read_bytes() == (source / name).read_bytes()  # same convert
    assert ml20m.train_set(tmp_path / "real").nb_users == 12


def test_training_triples_are_the_legacy_dataset(dataroot):
    """Each positive then 4 negatives of its user, never one of the user's positives."""
    import numpy as np

    data = ml20m.train_set(dataroot)
    triples = ml20m.TrainingTriples(data, negatives=4)
    assert len(triples) == 5 * len(data)
    users, items = data.users.tolist(), data.items.tolist()
    known = set(zip(users, items))
    for k in range(0, len(data), 7):
        (user, item, label), *negatives = (triples[5 * k + j] for j in range(5))
        assert (user, item) == (users[k], items[k])
        assert label.dtype == np.float32 and label.tolist() == [1]  # as the legacy's
        for u, i, label in negatives:
            assert u == user and label.tolist() == [0] and (u, i) not in known
            assert 0 <= i < data.nb_items


def test_training_triples_through_the_loader(dataroot):
    """A whole pass: every positive once with 4 negatives of its user; the same batches
    again for a seed and a worker count (a new draw at each pass, another with a new seed)."""
    import torch

    from milabench import helpers

    full = ml20m.train_set(dataroot)
    data = ml20m.Ratings(full.users[:800], full.items[:800], full.nb_users, full.nb_items)
    triples = ml20m.TrainingTriples(data, negatives=4)
    known = set(zip(data.users.tolist(), data.items.tolist()))

    def passes(workers: int, seed: int, count: int = 1) -> list[list[torch.Tensor]]:
        order = ml20m.ShuffledBatches(len(triples), len(data), seed)  # 5 batches a pass
        loader = helpers.data_loader(triples, len(data), workers, seed=seed, batch_sampler=order)
        return [[torch.cat(x) for x in zip(*loader)] for _ in range(count)]

    first, second = passes(2, seed=0, count=2)
    users, items, labels = first
    assert users.dtype == items.dtype == torch.int64 and labels.dtype == torch.float32
    labels = labels.view(-1)  # (batch, 1) as the legacy's
    pairs = list(zip(users.tolist(), items.tolist()))
    assert sorted(p for p, y in zip(pairs, labels.tolist()) if y == 1) == sorted(known)
    assert all(p not in known for p, y in zip(pairs, labels.tolist()) if y == 0)
    per_user = torch.bincount(users, minlength=data.nb_users)
    positives = torch.bincount(users[labels == 1], minlength=data.nb_users)
    assert torch.equal(per_user, 5 * positives)
    assert not torch.equal(first[1], second[1])  # new negatives at each pass
    again = passes(2, seed=0)[0]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(passes(2, seed=1)[0][1], items)


# -- the models' parts, in process ------------------------------------------------------------
def test_triple_sampler(dataroot):
    """``--sampler gpu``: the labels are the truth, one positive slot in five."""
    import torch

    from milabench.models.recom import TripleSampler

    torch.manual_seed(0)
    data = ml20m.train_set(dataroot)
    sampler = TripleSampler(data, negatives=4, device=torch.device("cpu"))
    assert sampler.total == 5 * len(data)
    known = set(zip(data.users.tolist(), data.items.tolist()))
    labels = []
    for _ in range(sampler.total // 1000 + 2):  # more than one pass: a new order
        users, items, label = sampler.batch(1000)
        assert users.shape == items.shape == label.shape == (1000,)
        assert [
            (u, i) in known for u, i in zip(users.tolist(), items.tolist())
        ] == label.bool().tolist()  # every label is the truth
        labels.append(label)
    share = float(torch.cat(labels).mean())
    assert 0.18 < share < 0.23  # one positive slot in five (and rare lucky negatives)


@pytest.mark.parametrize("cell", ["LSTM", "RNN_TANH", "RNN_RELU", "GRU"])
def test_rnn_model_cells(cell):
    import torch

    from milabench.models.wlm import RNNModel, detach

    model = RNNModel(cell, 50, 8, 8, 2, dropout=0.2, tie_weights=True)
    tokens = torch.randint(50, (5, 3))
    logits, hidden = model(tokens, model.init_hidden(3))
    assert logits.shape == (15, 50)
    assert model.decoder.weight is model.encoder.weight
    logits.sum().backward()
    again, _ = model(tokens, detach(hidden))  # the hidden state carries over, detached
    assert again.shape == (15, 50)


# -- the models -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "model, args",
    [("wlm", WLM_FP32_ARGS), ("wlm", WLM_FP16_ARGS), ("recom", RECOM_ARGS)],
    ids=["wlm", "wlm-fp16", "recom"],
)
def test_model_trains_on_synthetic_data(tmp_path, dataroot, model, args):
    result = run_trained(model, dataroot, tmp_path, args)
    if "--precision" in args:
        assert result["call"]["arguments"]["precision_used"] == "fp16"


@pytest.mark.slow  # its CLI path: test_missing_data.py says which fast test has it
@pytest.mark.parametrize("model", ["wlm", "recom"])
def test_model_without_data_fails_at_once(tmp_path, model):
    run_without_data(model, tmp_path)


@pytest.mark.parametrize(
    "model, argv, message",
    [
        ("wlm", ["--tied", "--emsize", "32", "--nhid", "64"], "--tied needs --emsize == --nhid"),
        ("wlm", ["--dropout", "1"], "--dropout 1.0"),
        ("wlm", ["--clip", "0"], "--clip 0.0"),
        ("wlm", ["--model", "TRANSFORMER"], "invalid choice: 'TRANSFORMER'"),
        (
            "wlm",
            ["--batch-size", "20000"],
            "--batch-size 20000 needs at least 40000 training tokens",
        ),
        ("recom", ["--layers", "255,64"], "--layers '255,64'"),
        ("recom", ["--layers", "a,b"], "--layers 'a,b'"),
        ("recom", ["--negatives", "-1"], "--negatives -1"),
        ("recom", ["--batch-size", "100000"], "--batch-size 100000 is more than the"),
    ],
)
def test_bad_arguments(dataroot, model, argv, message):
    assert_rejected(model, argv, message, dataroot)
