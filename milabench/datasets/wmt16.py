"""WMT16 English-German, joint BPE 32k: the data of the MLPerf GNMT (rnn_translator).

Layout (as the MLPerf ``download_dataset.sh`` leaves it): ``<root>/wmt16_de_en/`` holds
``train.tok.clean.bpe.32000.{en,de}`` (aligned train pairs, a sentence a line),
``newstest2014.tok.bpe.32000.{en,de}`` (test), ``bpe.32000`` (subword-nmt codes),
``vocab.bpe.32000`` (the train BPE tokens by decreasing frequency, as ``get_vocab.py | cut
-f1``; :class:`Tokenizer` adds GNMT's ``<pad> <unk> <s> <\\s>`` as ids 0-3) and the text
before BPE, ``train.tok.clean.{en,de}`` and ``newstest2014.tok.{en,de}``.

`download` is that pipeline in Python: Europarl v7 + CommonCrawl + News Commentary v11 and
newstest2014; :func:`tokenize` (Moses's ``tokenizer.perl -l en`` / ``-l de`` as the
sacremoses port runs it, offline); clean-corpus-n 1-80 and filter_dataset.py (latin-1);
joint BPE with subword_nmt (32,000 merges); the vocabulary. `synthesize` makes raw text of an
invented language pair (Zipf-distributed words; the German is the English translated word by
word, some words dropped or doubled, clauses verb-final, German number format) and runs the
same tokenize/BPE/vocabulary code: at the default 100,000 pairs the vocabulary is about the
real one's size (~30k; learning the codes takes ~4 minutes), tiny sets take seconds.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import re
import tarfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from milabench import datasets
from milabench.datasets._wmt16_words import make_lexicon as make_lexicon
from milabench.datasets._wmt16_words import make_pair as make_pair

NAME = "wmt16"
DEFAULT_SIZE = 100_000
MERGES = 32_000
CODES, VOCAB = f"bpe.{MERGES}", f"vocab.bpe.{MERGES}"
TRAIN, TEST = "train.tok.clean", "newstest2014.tok"  # stems of the tokenized files
PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<s>", "<\\s>")  # GNMT's seq2seq/data/config.py
CORPORA = ("europarl-v7.de-en", "commoncrawl.de-en", "news-commentary-v11.de-en")
NEWSTEST = {"en": "newstest2014-deen-ref.en.sgm", "de": "newstest2014-deen-src.de.sgm"}
SOURCES = {  # file -> (URL, the members used), as in MLPerf rnn_translator/download_dataset.sh
    "europarl-v7-de-en.tgz": ("http://www.statmt.org/europarl/v7/de-en.tgz", CORPORA[0]),
    "common-crawl.tgz": (
        "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        CORPORA[1],
    ),
    "nc-v11.tgz": (
        "http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz",
        CORPORA[2],
    ),
    "dev.tgz": ("http://data.statmt.org/wmt16/translation-task/dev.tgz", None),
}
BLOCK = 20_000  # lines per parallel task


def folder(root: Path) -> Path:
    return Path(root) / "wmt16_de_en"


# -- text processing, shared by download and synthesize --------------------------------------
@functools.lru_cache(maxsize=2)
def _moses(lang: str) -> Any:
    from sacremoses import MosesTokenizer  # its prefix lists ship with it: no download

    return MosesTokenizer(lang)


# tokenizer.perl splits the last word's period even after a non-breaking prefix (since
# 2018-11, before the legacy suite cloned it); sacremoses does not. A run of dots stays.
_LAST_PERIOD = re.compile(r"(?<=[^.\s])\.$")


def tokenize(line: str, lang: str) -> str:
    """Moses tokens joined by single spaces, as ``tokenizer.perl -l <lang>`` writes them:
    escaped (&apos; &quot; ...), hyphens kept inside words, the language's non-breaking
    prefixes (Mr. in English, Nr. in German) kept whole except as the last word."""
    return _LAST_PERIOD.sub(" .", _moses(lang).tokenize(line, escape=True, return_str=True))


def keep_pair(en: str, de: str) -> bool:
    """clean-corpus-n.perl 1 80 (and its length ratio 9), then filter_dataset.py (latin-1)."""
    n_en, n_de = en.count(" ") + 1 if en else 0, de.count(" ") + 1 if de else 0
    return (
        1 <= n_en <= 80
        and 1 <= n_de <= 80
        and max(n_en, n_de) <= 9 * min(n_en, n_de)
        and all(ord(c) < 256 for c in en + de)
    )


def _tokenize_block(clean: bool, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out = [(tokenize(en, "en"), tokenize(de, "de")) for en, de in pairs]
    return [p for p in out if keep_pair(*p)] if clean else out


def _map_blocks(function: Callable[[list], Any], items: Iterable, workers: int) -> Iterator:
    """``function`` over consecutive blocks of ``items``, ``workers`` processes, in order."""
    blocks = iter(lambda: list(itertools.islice(items, BLOCK)), [])
    while batch := list(itertools.islice(blocks, 4 * max(1, workers))):
        yield from datasets.parallel(function, batch, workers)


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="ignore", newline="\n") as f:  # \n only
        yield from (line.rstrip("\n") for line in f)


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    # No finished data is here (no marker): one writer (this process) per file.
    datasets.write_new(path, "".join(f"{line}\n" for line in lines).encode(), replace=True)


def write_tokenized(
    base: Path, stem: str, pairs: Iterable[tuple[str, str]], workers: int, clean: bool
) -> int:
    """Tokenize raw (en, de) pairs into ``<stem>.{en,de}``; returns the number of pairs."""
    for lang in ("en", "de"):  # once, before the workers fork (~1 s to build)
        _moses(lang)
    kept = [
        p
        for block in _map_blocks(functools.partial(_tokenize_block, clean), iter(pairs), workers)
        for p in block
    ]
    for i, lang in enumerate(("en", "de")):
        _write_lines(base / f"{stem}.{lang}", (p[i] for p in kept))
    return len(kept)


def _count_block(lines: list[str]) -> Counter:
    return Counter(token for line in lines for token in line.split())


@functools.lru_cache(maxsize=2)
def _codes(path: str, mtime: int) -> Any:
    from subword_nmt.apply_bpe import BPE

    with open(path, encoding="utf-8") as f:
        return BPE(f)


def _bpe_block(path: str, lines: list[str]) -> list[str]:
    bpe = _codes(path, Path(path).stat().st_mtime_ns)
    return [bpe.process_line(line) for line in lines]


def encode(base: Path, workers: int, merges: int = MERGES) -> None:
    """Joint BPE as the MLPerf script does it: learn ``merges`` codes on the train text (de
    then en), apply them to the train and newstest2014 files, count the vocabulary."""
    from subword_nmt.learn_bpe import learn_bpe

    counts: Counter = Counter()
    for lang in ("de", "en"):
        for part in _map_blocks(_count_block, _lines(base / f"{TRAIN}.{lang}"), workers):
            counts.update(part)
    words = "".join(f"{w} {c}\n" for w, c in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
    codes = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):  # "no pair has frequency >= 2. Stopping"
        learn_bpe(io.StringIO(words), codes, merges, is_dict=True)
    datasets.write_new(base / CODES, codes.getvalue().encode(), replace=True)
    apply = functools.partial(_bpe_block, str(base / CODES))
    vocab: Counter = Counter()
    for stem in (TRAIN, TEST):
        for lang in ("en", "de"):
            lines = [
                x for b in _map_blocks(apply, _lines(base / f"{stem}.{lang}"), workers) for x in b
            ]
            _write_lines(base / f"{stem}.bpe.{MERGES}.{lang}", lines)
            if stem == TRAIN:  # get_vocab.py over the train text, en then de
                for part in _map_blocks(_count_block, iter(lines), workers):
                    vocab.update(part)
    _write_lines(base / VOCAB, (token for token, _ in vocab.most_common()))


# -- the real data ----------------------------------------------------------------------------
def _extract(archive: Path, names: list[str], dest: Path) -> dict[str, Path]:
    """The members of ``archive`` named ``names`` (in any folder), extracted under dest."""
    with tarfile.open(archive) as tar:
        members = [m for m in tar if m.isfile() and Path(m.name).name in names]
        tar.extractall(dest, members, filter="data")
    found = {Path(m.name).name: dest / m.name for m in members}
    if len(found) < len(names):
        raise datasets.DataMissing(f"{archive}: {sorted(set(names) - set(found))} missing")
    return found


def _sgm_lines(path: Path) -> list[str]:
    """The segments of an SGML test file (what input-from-sgm.perl prints)."""
    text = path.read_text(encoding="utf-8", errors="ignore")
    return [s.strip() for s in re.findall(r"<seg[^>]*>(.*?)</seg>", text)]


def download(root: Path) -> Path:
    """The real WMT16 en-de, processed like the MLPerf GNMT script (takes hours: BPE)."""
    base = folder(root)
    return datasets.real_data(base, lambda: _fetch(base))


def _fetch(base: Path) -> dict[str, int]:
    raw, workers = base / "data", datasets.default_workers()
    files: dict[str, Path] = {}
    for name, (url, corpus) in SOURCES.items():
        archive = datasets.fetch(url, raw / name)
        members = list(NEWSTEST.values()) if corpus is None else [f"{corpus}.en", f"{corpus}.de"]
        files.update(_extract(archive, members, raw / name.removesuffix(".tgz")))

    def train_pairs() -> Iterator[tuple[str, str]]:
        for corpus in CORPORA:
            yield from zip(_lines(files[f"{corpus}.en"]), _lines(files[f"{corpus}.de"]))

    size = write_tokenized(base, TRAIN, train_pairs(), workers, clean=True)
    test = zip(_sgm_lines(files[NEWSTEST["en"]]), _sgm_lines(files[NEWSTEST["de"]]))
    write_tokenized(base, TEST, test, workers, clean=False)
    encode(base, workers)
    return {"size": size}


# -- synthetic data ---------------------------------------------------------------------------
def _pairs_chunk(task: tuple[int, str, range]) -> list[tuple[str, str]]:
    seed, split, indices = task
    return [make_pair(seed, split, i) for i in indices]


def synthesize(root: Path, size: int = DEFAULT_SIZE, seed: int = 0, workers: int = 1) -> Path:
    """``size`` train pairs and ``min(3003, max(1, size // 20))`` test pairs (newstest2014
    has 3003), through the real tokenize/BPE/vocabulary code; deterministic for ``seed``.

    Finished data already in the folder is kept (see :func:`datasets.ready`).
    """
    base = folder(root)
    return datasets.synthesis(
        base,
        NAME,
        size,
        seed,
        unit="sentence pair",
        write=lambda: _write_synthetic(base, size, seed, workers),
    )


def _write_synthetic(base: Path, size: int, seed: int, workers: int) -> None:
    make_lexicon(seed)  # once, before the workers fork
    test = min(3003, max(1, size // 20))
    for split, stem, count in (("train", TRAIN, size), ("test", TEST, test)):
        pairs = datasets.flatten(
            datasets.map_chunks(
                _pairs_chunk, count, workers, lambda r, split=split: (seed, split, r)
            )
        )
        write_tokenized(base, stem, pairs, workers, clean=split == "train")
    encode(base, workers)


# -- loading ----------------------------------------------------------------------------------
class Tokenizer:
    """GNMT's vocabulary: <pad> <unk> <s> <\\s> (ids 0-3), the vocab file's tokens, then
    ``madeupwordNNNN`` up to a multiple of ``pad_to`` (tensor-core friendly sizes)."""

    def __init__(self, path: Path, pad_to: int = 8):
        skip = {*SPECIALS, "</s>", ""}  # the TF-NMT variant of the file lists specials first
        tokens = [*SPECIALS, *dict.fromkeys(t for t in _lines(path) if t not in skip)]
        self.tokens = tokens + [f"madeupword{i:04d}" for i in range(-len(tokens) % pad_to)]
        self.ids = {token: i for i, token in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def segment(self, line: str) -> list[int]:
        """BOS, the line's token ids (unknown -> UNK), EOS."""
        return [BOS, *(self.ids.get(t, UNK) for t in line.split()), EOS]

    def detokenize(self, ids: Iterable[int]) -> str:
        return " ".join(self.tokens[i] for i in ids if i > EOS).replace("@@ ", "")


def _line_index(path: Path) -> tuple[Any, Any, Any, Any]:
    """A memory map of a text file, its line starts and ends, and tokens per line: no Python
    object per line (the real train files hold 4.5M), pages shared by DataLoader workers."""
    import numpy as np

    size = path.stat().st_size
    data = np.memmap(path, np.uint8, mode="r") if size else np.zeros(0, np.uint8)
    ends = np.flatnonzero(data == 10)
    if size and data[-1] != 10:
        ends = np.append(ends, size)
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    spaces = np.add.reduceat(data == 32, starts, dtype=np.int64) if len(ends) else ends
    return data, starts, ends, np.where(ends > starts, spaces + 1, 0)  # 1-space separated


class ParallelText:
    """(source ids, target ids) int64 tensors of the pairs whose sides both have 1 to
    ``max_length`` tokens counting BOS and EOS (GNMT's LazyParallelDataset filter)."""

    def __init__(self, src: Path, tgt: Path, tokenizer: Tokenizer, max_length: int):
        import numpy as np

        self.files, self.tokenizer = [_line_index(src), _line_index(tgt)], tokenizer
        (_, _, src_ends, src_tokens), (_, _, tgt_ends, tgt_tokens) = self.files
        if len(src_ends) != len(tgt_ends):
            raise ValueError(f"{src} and {tgt} have {len(src_ends)} and {len(tgt_ends)} lines")
        ok = [(n >= 1) & (n + 2 <= max_length) for n in (src_tokens, tgt_tokens)]
        self.index = np.flatnonzero(ok[0] & ok[1])
        # Tokens of each kept pair, both sides with BOS and EOS: what bucketing sorts by.
        self.lengths = (src_tokens + tgt_tokens + 4)[self.index]

    def __len__(self) -> int:
        return len(self.index)

    def line(self, side: int, i: int) -> str:
        """Line ``i`` of the file (0: source, 1: target), counting the filtered-out ones."""
        data, starts, ends, _ = self.files[side]
        return bytes(data[starts[i] : ends[i]]).decode("utf-8", errors="ignore")

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        import torch

        j = int(self.index[i])
        return tuple(torch.tensor(self.tokenizer.segment(self.line(k, j))) for k in (0, 1))


def collate(pairs: list[tuple[Any, Any]]) -> tuple[Any, Any, Any]:
    """Pairs -> (src (S, B), src_lengths (B,), tgt (T, B)): time-major, PAD-padded, sorted by
    decreasing source length as pack_padded_sequence wants."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    pairs = sorted(pairs, key=lambda p: len(p[0]), reverse=True)
    src, tgt = (pad_sequence(side, padding_value=PAD) for side in zip(*pairs))
    return src, torch.tensor([len(s) for s, _ in pairs]), tgt


def train_set(
    root: Path, max_length: int = 50, src: str = "en", tgt: str = "de", split: str = "train"
) -> ParallelText:
    """The train (or ``split="test"``: newstest2014) pairs, en -> de by default."""
    base = datasets.require(folder(root), NAME, Path(root))
    stem = f"{TRAIN if split == 'train' else TEST}.bpe.{MERGES}"
    return ParallelText(
        base / f"{stem}.{src}", base / f"{stem}.{tgt}", Tokenizer(base / VOCAB), max_length
    )
