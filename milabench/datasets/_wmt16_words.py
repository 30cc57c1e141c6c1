"""wmt16's synthetic language: an English lexicon of made-up words, each with a German
translation of 0-2 words, and sentence pairs drawn from it (Zipf word frequencies, numbers
written the German way, the German verb-final), a pure function of the seed and the pair's
place. milabench.datasets.wmt16 tokenizes, BPE-encodes and writes them as the real data."""

from __future__ import annotations

import functools
import itertools
import random
from typing import Any

from milabench import datasets

LEXICON = 30_000  # English words; each has a German translation of 0-2 words
DECIMAL_DE = str.maketrans(",.", ".,")  # 1,500.5 -> 1.500,5
SOUNDS = {  # onsets, vowels, codas
    "en": (
        "b c d f g h j k l m n p r s t v w y z st tr pl br ch sh th".split(),
        "a e i o u ea ou ai".split(),
        ["", "", "n", "r", "s", "t", "ck", "nd", "ng"],
    ),
    "de": (
        "b d f g h k l m n p r s t w z sch st pf kr gr ch".split(),
        "a e i o u ä ö ü ei au ie".split(),
        ["", "", "n", "r", "s", "t", "ß", "ch", "nd"],
    ),
}


def _words(rng: random.Random, lang: str, count: int, seen: set[str]) -> list[str]:
    """``count`` distinct made-up words, longer as they get rarer (by rank)."""
    onsets, vowels, codas = SOUNDS[lang]
    words: list[str] = []
    while len(words) < count:
        rank = len(words)
        syllables = 1 + (rank >= 100) + (rank >= 3000 and rng.random() < 0.5)
        word = "".join(
            rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(syllables)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


@functools.lru_cache(maxsize=2)
def make_lexicon(seed: int) -> tuple[list[str], list[tuple[str, ...]]]:
    """English words by frequency rank and their German translations: frequent words are
    sometimes dropped (articles), 12% of words become two words, every 4th is a noun."""
    rng = random.Random(datasets.item_seed(seed, "lexicon"))
    seen: set[str] = set()
    english = _words(rng, "en", LEXICON, seen)
    german, particles = _words(rng, "de", LEXICON, seen), _words(rng, "de", 30, seen)
    translations = []
    for rank, word in enumerate(german):
        word = word.capitalize() if rank % 4 == 0 else word
        if rank < 40 and rank % 3 == 1:
            translations.append(())
        elif rng.random() < 0.12:
            translations.append((word, rng.choice(particles)))
        else:
            translations.append((word,))
    return english, translations


@functools.lru_cache(maxsize=1)
def _zipf() -> list[float]:
    return list(itertools.accumulate(1.0 / (rank + 3) for rank in range(LEXICON)))


def make_pair(seed: int, split: str, index: int) -> tuple[str, str]:
    """One raw (English, German) sentence pair; the German is a function of the English."""
    english, german = make_lexicon(seed)
    rng = random.Random(datasets.item_seed(seed, split, index))
    clauses_en, clauses_de = [], []
    for _ in range(rng.randint(1, 3)):
        items: list[Any] = rng.choices(range(LEXICON), cum_weights=_zipf(), k=rng.randint(3, 14))
        if rng.random() < 0.2:  # a number: 1,500 -> 1.500, 3.5 -> 3,5
            en = (
                f"{rng.randint(1, 99) * 100:,}"
                if rng.random() < 0.5
                else f"{rng.randint(0, 20)}.{rng.randint(0, 9)}"
            )
            items.insert(rng.randrange(len(items)), (en, en.translate(DECIMAL_DE)))
        en_words = [english[x] if isinstance(x, int) else x[0] for x in items]
        order = [items[0], *items[2:], items[1]]  # verb-final: the 2nd item goes last
        de_words = [w for x in order for w in (german[x] if isinstance(x, int) else x[1:])]
        clauses_en.append(" ".join(en_words))
        clauses_de.append(" ".join(de_words))
    end = "?" if rng.random() < 0.1 else "."
    en, de = ", ".join(clauses_en) + end, ", ".join(clauses_de) + end
    return en[:1].upper() + en[1:], de[:1].upper() + de[1:]
