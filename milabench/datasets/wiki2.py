"""WikiText-2: wikitext-2/wiki.{train,valid,test}.tokens, read as in PyTorch's word LM example.

Layout: ``<root>/wikitext-2/wiki.{train,valid,test}.tokens``, the tokenised text of the real
dataset (WikiText-2 v1: 2,088,628 / 217,646 / 245,569 tokens counting one ``<eos>`` per
line, 33,278 words). `download` fetches the legacy zip and extracts those three files.
`synthesize` writes text in the same form: articles made of headings (`` = Title = ``,
`` = = Section = = ``), blank lines and paragraphs of sentences ending with `` .``, every
line starting with a space and ending with `` \\n``; words are drawn from a Zipf law over a
33k-word vocabulary (frequent real tokens such as ``the``, ``,`` and ``<unk>`` first, then
``w123``-style words). ``size`` is the number of training tokens as :class:`Corpus` counts
them (words + one ``<eos>`` per line), exactly; valid and test get ``size // 10`` each.

Loading: :func:`corpus` builds the dictionary over train, valid and test (in that order,
each line's words then ``<eos>``) and returns the three splits as 1-D LongTensors;
:func:`batchify` cuts one into ``batch_size`` columns.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from milabench import datasets

NAME = "wiki2"
DEFAULT_SIZE = 2_088_628  # tokens in the real wiki.train.tokens
URLS = (
    "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
    # The original bucket has been unreliable; the Internet Archive keeps the same file.
    "https://web.archive.org/web/2020id_/https://s3.amazonaws.com/research.metamind.io/"
    "wikitext/wikitext-2-v1.zip",
)
MD5 = "542ccefacc6c27f945fb54453812b3cd"
SPLITS = ("train", "valid", "test")
EOS = "<eos>"
ARTICLE_TOKENS = 3_500  # the real train split: ~600 articles of ~3,500 tokens
VOCAB_SIZE = 33_278  # the real dictionary size, <eos> included
ZIPF_SHIFT = 2.7  # Zipf-Mandelbrot offset: "the" gets ~4% of the words, as in the real text
# The most frequent tokens of the real text (roughly in order): they take the top ranks.
COMMON = (
    "the , <unk> of and in to a \" was The 's @-@ on as for that with by is his at "
    "from it he were an had which be ( ) ; : @,@ @.@ In are but her first not also "
    "their its has one after two who they been she this or all He time new other"
).split()


def folder(root: Path) -> Path:
    return Path(root) / "wikitext-2"


def split_file(base: Path, split: str) -> Path:
    return base / f"wiki.{split}.tokens"


# -- synthesis ---------------------------------------------------------------------
def vocabulary() -> list[str]:
    """The words of the synthetic text by Zipf rank ("." and "=" are structure, not drawn)."""
    count = VOCAB_SIZE - 3  # minus <eos>, "." and "="
    return COMMON + [f"w{rank}" for rank in range(len(COMMON), count)]


class _Writer:
    """Draws the words and lines of synthetic articles with one random generator."""

    def __init__(self, rng: Any, words: list[str], cdf: Any):
        self.rng, self.words, self.cdf = rng, words, cdf

    def zipf(self, count: int) -> list[str]:
        ranks = self.cdf.searchsorted(self.rng.random(count), side="right")
        return [self.words[r] for r in ranks]

    def title(self) -> list[str]:
        ranks = self.rng.integers(200, len(self.words), size=int(self.rng.integers(1, 4)))
        return [self.words[r] for r in ranks]

    def paragraph(self) -> list[str]:
        words: list[str] = []
        for _ in range(int(self.rng.integers(2, 9))):
            words += self.zipf(int(self.rng.integers(6, 40))) + ["."]
        return words

    def lines(self) -> Any:
        """Endless lines (word lists, [] for a blank line) of one article."""
        yield []
        yield ["=", *self.title(), "="]
        yield []
        while True:
            for _ in range(int(self.rng.integers(1, 5))):
                yield self.paragraph()
            level = 2 if self.rng.random() < 0.75 else 3
            yield []
            yield ["="] * level + self.title() + ["="] * level
            yield []

    def article(self, budget: int) -> list[list[str]]:
        """Lines worth exactly ``budget`` tokens (each line costs its words + <eos>)."""
        out: list[list[str]] = []
        for words in self.lines():
            if len(words) + 1 > budget:  # the last line: fill what is left
                filler = self.zipf(budget - 1)
                if len(filler) >= 2:
                    filler[-1] = "."
                out.append(filler)
                break
            out.append(words)
            budget -= len(words) + 1
            if budget == 0:
                break
        return out


def _zipf_cdf(count: int) -> Any:
    import numpy as np

    weights = 1.0 / (np.arange(count) + ZIPF_SHIFT)
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _write_articles(task: tuple[str, range, int, int]) -> str:
    import numpy as np

    split, articles, total, seed = task
    words = vocabulary()
    cdf = _zipf_cdf(len(words))
    text = []
    for i in articles:
        budget = min(ARTICLE_TOKENS, total - i * ARTICLE_TOKENS)
        writer = _Writer(np.random.default_rng(datasets.item_seed(seed, split, i)), words, cdf)
        for line in writer.article(budget):
            text.append(" " + " ".join(line) + " \n" if line else " \n")
    return "".join(text)


def split_sizes(size: int) -> dict[str, int]:
    """Tokens per split: ``size`` for train, a tenth of it (at least 1) for valid and test."""
    return {"train": size, "valid": max(1, size // 10), "test": max(1, size // 10)}


def synthesize(root: Path, size: int = DEFAULT_SIZE, seed: int = 0, workers: int = 1) -> Path:
    """WikiText-like files with exactly ``size`` training tokens; deterministic for ``seed``.

    Finished data already in the folder is kept (see :func:`datasets.ready`).
    """
    base = folder(root)
    return datasets.synthesis(
        base,
        NAME,
        size,
        seed,
        unit="token",
        write=lambda: _write_synthetic(base, size, seed, workers),
    )


def _write_synthetic(base: Path, size: int, seed: int, workers: int) -> None:
    for split, tokens in split_sizes(size).items():
        articles = -(-tokens // ARTICLE_TOKENS)
        text = "".join(
            datasets.map_chunks(
                _write_articles,
                articles,
                workers,
                lambda r, split=split, tokens=tokens: (split, r, tokens, seed),
            )
        )
        # No marker yet: files left by an interrupted run are stale, and this process is
        # the only writer of each file, so replacing them is safe.
        datasets.write_new(split_file(base, split), text.encode(), replace=True)


def download(root: Path) -> Path:
    """The real WikiText-2 (v1, tokenised) from the legacy zip; only the three token files."""
    base = folder(root)
    return datasets.real_data(base, lambda: _fetch(base))


def _fetch(base: Path) -> dict[str, int]:
    archive = base / "downloads" / "wikitext-2-v1.zip"
    for number, url in enumerate(URLS):
        try:
            datasets.fetch(url, archive, md5=MD5)
            break
        except (OSError, datasets.DataMissing):
            if number == len(URLS) - 1:
                raise
    with zipfile.ZipFile(archive) as zf:
        for split in SPLITS:
            name = split_file(base, split).name
            datasets.write_new(split_file(base, split), zf.read(f"wikitext-2/{name}"), replace=True)
    archive.unlink()
    archive.parent.rmdir()
    return {"size": DEFAULT_SIZE}


# -- loading -----------------------------------------------------------------------
class Dictionary:
    """Words <-> indices, in order of first appearance."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        index = self.word2idx.get(word)
        if index is None:
            index = self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return index

    def __len__(self) -> int:
        return len(self.idx2word)


class Corpus:
    """The three splits as LongTensors of word indices over one shared dictionary.

    ``pad_to_multiple_of`` adds unused words so the vocabulary (the decoder's output size)
    is a multiple of it, as the legacy fp16 run did for tensor cores.
    """

    def __init__(self, base: Path, pad_to_multiple_of: int = 1):
        self.dictionary = Dictionary()
        self.train = self.tokenize(split_file(base, "train"))
        self.valid = self.tokenize(split_file(base, "valid"))
        self.test = self.tokenize(split_file(base, "test"))
        while len(self.dictionary) % pad_to_multiple_of:
            self.dictionary.add_word(f"<pad{len(self.dictionary)}>")

    def tokenize(self, path: Path) -> Any:
        """Each line's words then <eos>, as indices (new words join the dictionary)."""
        import torch

        add = self.dictionary.add_word
        ids: list[int] = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                ids.extend(add(word) for word in line.split())
                ids.append(add(EOS))
        return torch.tensor(ids, dtype=torch.long)


def corpus(root: Path, pad_to_multiple_of: int = 1) -> Corpus:
    """The tokenised WikiText-2 in ``root`` (fails with the command to run if missing)."""
    base = datasets.require(folder(root), NAME, Path(root))
    return Corpus(base, pad_to_multiple_of)


def batchify(data: Any, batch_size: int) -> Any:
    """A 1-D token tensor as ``batch_size`` contiguous columns: (len // batch_size) x batch_size.

    Column j holds the j-th slice of the text; the remainder that does not fill a row is
    dropped. The columns are trained as independent streams.
    """
    rows = data.size(0) // batch_size
    return data.narrow(0, 0, rows * batch_size).view(batch_size, rows).t().contiguous()
