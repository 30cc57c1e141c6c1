"""WMT16 (synthesized through the real tokenize/BPE/vocabulary code, read back by its
loader) and the translator test (GNMT).

The model runs through the real ``milarun run`` CLI on tiny synthetic data with one torch
thread (like one CPU slice of this 2-core machine).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from milabench import datasets
from milabench.datasets import wmt16
from modelrun import assert_rejected, run_trained, run_without_data

SIZE = 200  # pairs: ~4 s to synthesize (BPE learning), ~150 of them fit in 50 tokens
FILES = {
    "train.tok.clean.en",
    "train.tok.clean.de",
    "newstest2014.tok.en",
    "newstest2014.tok.de",
    "train.tok.clean.bpe.32000.en",
    "train.tok.clean.bpe.32000.de",
    "newstest2014.tok.bpe.32000.en",
    "newstest2014.tok.bpe.32000.de",
    "bpe.32000",
    "vocab.bpe.32000",
    datasets.MARKER,
}
# Trains for 6 slices of 0.5 s, however fast this machine is.
TRANSLATOR_ARGS = [
    "--batch-size",
    "16",
    "--hidden-size",
    "64",
    "--num-layers",
    "2",
    "--workers",
    "0",
    "--min-slices",
    "6",
]


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# Every test here on one worker, in a row: the data below is synthesized once.
pytestmark = pytest.mark.xdist_group(name="translator")


@pytest.fixture(scope="module")
def dataroot(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wmt16-data")
    wmt16.synthesize(root, SIZE, seed=0, workers=2)
    return root


# -- the dataset ------------------------------------------------------------------------------
def test_layout_and_line_counts(dataroot):
    base = wmt16.folder(dataroot)
    assert base == dataroot / "wmt16_de_en"
    assert {p.name for p in base.iterdir()} == FILES
    for stem, count in (("train.tok.clean", SIZE), ("newstest2014.tok", SIZE // 20)):
        for lang in ("en", "de"):
            assert len(lines(base / f"{stem}.{lang}")) == count
            assert len(lines(base / f"{stem}.bpe.32000.{lang}")) == count
    assert lines(base / "bpe.32000")[0] == "#version: 0.2"
    assert datasets.is_synthetic(base) is True


def test_bpe_text_is_the_tokenized_text_in_pieces(dataroot):
    base = wmt16.folder(dataroot)
    for stem in ("train.tok.clean", "newstest2014.tok"):
        for lang in ("en", "de"):
            pieces = (base / f"{stem}.bpe.32000.{lang}").read_text(encoding="utf-8")
            assert pieces.replace("@@ ", "") == (base / f"{stem}.{lang}").read_text("utf-8")
    train = (base / "train.tok.clean.bpe.32000.en").read_text(encoding="utf-8")
    assert "@@ " in train  # rare words are split into continuation pieces
    assert not any(line.endswith("@@") for line in train.splitlines())


def test_vocab_is_the_train_tokens_by_frequency(dataroot):
    base = wmt16.folder(dataroot)
    counts = Counter(
        token
        for lang in ("en", "de")
        for line in lines(base / f"train.tok.clean.bpe.32000.{lang}")
        for token in line.split()
    )
    vocab = lines(base / "vocab.bpe.32000")
    assert len(vocab) == len(set(vocab)) == len(counts) and set(vocab) == set(counts)
    frequencies = [counts[t] for t in vocab]
    assert frequencies == sorted(frequencies, reverse=True)
    assert not set(wmt16.SPECIALS) & set(vocab)  # the tokenizer adds them


def test_tokenizer_follows_gnmt_conventions(dataroot):
    tokenizer = wmt16.Tokenizer(wmt16.folder(dataroot) / "vocab.bpe.32000")
    vocab = lines(wmt16.folder(dataroot) / "vocab.bpe.32000")
    assert tokenizer.tokens[:4] == ["<pad>", "<unk>", "<s>", "<\\s>"]
    assert tokenizer.tokens[4 : 4 + len(vocab)] == vocab
    assert len(tokenizer) % 8 == 0
    assert all(t.startswith("madeupword") for t in tokenizer.tokens[4 + len(vocab) :])
    ids = tokenizer.segment(f"{vocab[0]} {vocab[1]} never-seen")
    assert ids == [wmt16.BOS, 4, 5, wmt16.UNK, wmt16.EOS]


def test_tokenize_like_moses():
    """``tokenizer.perl -l en`` / ``-l de`` as the legacy wmt16.sh ran it: punctuation split
    off, numbers kept whole, English contractions split right, German apostrophes split on
    both sides, non-breaking prefixes kept except as the last word, XML escapes."""
    for line, lang, moses in [
        (
            'He said: "don\'t", paid 1,500.50 (in 2014)... & more',
            "en",
            "He said : &quot; don &apos;t &quot; , paid 1,500.50 ( in 2014 ) ... &amp; more",
        ),
        (
            "It's the boys' toys, isn't it? Mr. Smith paid $3.50.",
            "en",
            "It &apos;s the boys &apos; toys , isn &apos;t it ? Mr. Smith paid $ 3.50 .",
        ),
        ("Wait for the U.S. So it goes...", "en", "Wait for the U.S. So it goes ..."),
        ("  Er  sagt: 'nein' - 3,5 Mio. ", "de", "Er sagt : &apos; nein &apos; - 3,5 Mio ."),
        (
            "Am 3. Mai ging's los: 1.500,5 Euro, d.h. viel!",
            "de",
            "Am 3. Mai ging &apos; s los : 1.500,5 Euro , d.h. viel !",
        ),
        (
            "Der Preis [ca. 5 <10> | 6] stieg.",
            "de",
            "Der Preis &#91; ca. 5 &lt; 10 &gt; &#124; 6 &#93; stieg .",
        ),
    ]:
        assert wmt16.tokenize(line, lang) == moses


def test_clean_filter_like_the_legacy_scripts():
    assert wmt16.keep_pair("a b", "c")
    assert not wmt16.keep_pair("", "c")  # empty side
    assert not wmt16.keep_pair(" ".join("a" * 81), "c " * 40)  # > 80 tokens
    assert not wmt16.keep_pair(" ".join(["a"] * 10), "c")  # length ratio > 9
    assert not wmt16.keep_pair("a", "Предложение")  # not latin-1 (filter_dataset.py)


def test_german_is_a_function_of_the_english():
    english, german = wmt16.make_lexicon(0)
    translation = dict(zip(english, german))
    for i in range(50):
        en, de = wmt16.make_pair(0, "train", i)
        assert (en, de) == wmt16.make_pair(0, "train", i)
        expected = Counter(
            w.lower()
            for word in wmt16.tokenize(en, "en").lower().split()
            for w in translation.get(word, ())
        )
        words = Counter(w.lower() for w in wmt16.tokenize(de, "de").split() if w.isalpha())
        assert words == expected  # word by word (numbers and punctuation aside)


def test_loader_pairs_filtered_by_length(dataroot):
    base = wmt16.folder(dataroot)
    en = lines(base / "train.tok.clean.bpe.32000.en")
    de = lines(base / "train.tok.clean.bpe.32000.de")
    fits = [i for i in range(SIZE) if len(en[i].split()) <= 48 and len(de[i].split()) <= 48]
    data = wmt16.train_set(dataroot)
    assert 0 < len(data) == len(fits) < SIZE
    vocabulary = len(data.tokenizer)
    for k in (0, len(data) - 1):
        src, tgt = data[k]
        assert src.dtype == tgt.dtype == torch.int64
        assert src[0] == tgt[0] == wmt16.BOS and src[-1] == tgt[-1] == wmt16.EOS
        assert len(src) <= 50 and len(tgt) <= 50 and int(src.max()) < vocabulary
        assert data.tokenizer.detokenize(src.tolist()) == en[fits[k]].replace("@@ ", "")
        assert data.tokenizer.detokenize(tgt.tolist()) == de[fits[k]].replace("@@ ", "")
    assert len(wmt16.train_set(dataroot, max_length=30)) < len(data)
    assert len(wmt16.train_set(dataroot, split="test", max_length=1000)) == SIZE // 20


def test_line_index_counts_tokens(tmp_path):
    path = tmp_path / "text"
    path.write_bytes("a b\nc\n\nd é f".encode())  # an empty line, no final newline
    data, starts, ends, tokens = wmt16._line_index(path)
    assert tokens.tolist() == [2, 1, 0, 3]
    assert bytes(data[starts[3] : ends[3]]).decode() == "d é f"


def test_collate_pads_and_sorts_by_source_length(dataroot):
    data = wmt16.train_set(dataroot)
    pairs = [data[i] for i in range(6)]
    src, lengths, tgt = wmt16.collate(pairs)
    assert lengths.tolist() == sorted((len(s) for s, _ in pairs), reverse=True)
    assert src.shape == (max(lengths), 6) and tgt.shape[1] == 6
    for b in range(6):
        n = int(lengths[b])
        (original,) = [p for p in pairs if len(p[0]) == n and torch.equal(p[0], src[:n, b])]
        assert torch.equal(tgt[: len(original[1]), b], original[1])  # pairs stay together
        assert (src[n:, b] == wmt16.PAD).all() and (tgt[len(original[1]) :, b] == wmt16.PAD).all()


# -- the batches ------------------------------------------------------------------------------
def test_bucketing_sampler_follows_the_legacy_rule():
    """A permutation cut into shards of 80 batches, each sorted by length, batches shuffled."""
    from milabench.models.translator import BucketingSampler

    lengths = torch.randint(6, 100, (1003,))
    sampler = BucketingSampler(lengths, 4, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 250 and {len(b) for b in batches} == {4}
    order = torch.randperm(1003, generator=torch.Generator().manual_seed(3))[:1000]
    shards = [set(shard.tolist()) for shard in order.split(80 * 4)]  # 320, 320, 320, 40
    where = [next(k for k, shard in enumerate(shards) if set(b) <= shard) for b in batches]
    assert sorted(where) != where  # the batches are shuffled across shards
    for k, shard in enumerate(shards):
        runs = sorted(([int(lengths[i]) for i in b] for b, w in zip(batches, where) if w == k))
        assert sum(len(r) for r in runs) == len(shard)
        assert all(max(a) <= min(b) for a, b in zip(runs, runs[1:]))  # sorted, then cut
    assert list(sampler) != batches  # a new order at each pass


def test_bucketing_pads_less_than_random_batches(dataroot):
    from milabench.models.translator import BucketingSampler

    data = wmt16.train_set(dataroot)
    sizes = [(len(s), len(t)) for s, t in (data[i] for i in range(len(data)))]
    assert data.lengths.tolist() == [s + t for s, t in sizes]

    def padding(bucket: bool) -> int:  # PAD tokens in a pass, both sides
        batches = list(BucketingSampler(data.lengths, 16, seed=0, bucket=bucket))
        return sum(
            max(sizes[i][k] for i in b) * len(b) - sum(sizes[i][k] for i in b)
            for b in batches
            for k in (0, 1)
        )

    assert padding(True) < 0.5 * padding(False)


# -- the model --------------------------------------------------------------------------------
def test_padding_does_not_change_a_translation(dataroot):
    """Packed encoder + attention mask: a pair's logits are the same alone or in a batch."""
    from milabench.models.translator import GNMT

    torch.manual_seed(0)
    data = wmt16.train_set(dataroot)
    model = GNMT(len(data.tokenizer), hidden=16, layers=3, dropout=0.2).eval()
    pairs = sorted((data[i] for i in range(5)), key=lambda p: len(p[0]), reverse=True)
    src, lengths, tgt = wmt16.collate(pairs)
    with torch.no_grad():
        batch = model(src, lengths, tgt[:-1])
        s, t = pairs[-1]  # the shortest source: the most padding in the batch
        alone = model(s[:, None], torch.tensor([len(s)]), t[:-1, None])
    assert batch.shape == (tgt.shape[0] - 1, 5, len(data.tokenizer))
    torch.testing.assert_close(batch[: len(t) - 1, -1], alone[:, 0], atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_translator_trains_on_synthetic_data(tmp_path, dataroot):
    result = run_trained("translator", dataroot, tmp_path, TRANSLATOR_ARGS)
    assert result["metrics"]["loss"] > 0 and result["call"]["arguments"]["bucketing"]
    assert result["timings"]["train"]["count"] % 16 == 0  # whole batches of 16 pairs


@pytest.mark.slow  # its CLI path: test_missing_data.py says which fast test has it
def test_translator_without_data_fails_at_once(tmp_path):
    run_without_data("translator", tmp_path)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num-layers", "1"], "--num-layers 1"),
        (["--batch-size", "0"], "--batch-size: 0"),
        (["--dropout", "1.5"], "--dropout 1.5"),
        (["--max-length", "2"], "--max-length 2"),
    ],
)
def test_translator_bad_arguments(argv, message):
    assert_rejected("translator", argv, message)
