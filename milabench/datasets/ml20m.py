"""MovieLens-20M in the NCF (MLPerf 0.5 recommendation) layout, under ml-20m/.

``ratings.csv`` is MovieLens' own file (header ``userId,movieId,rating,timestamp``, one
rating per line, sorted by user then movie). :func:`convert` turns it into what the legacy
NCF benchmark reads, with the semantics of MLPerf's ``convert.py``: users with fewer than
20 ratings are dropped; users and items get contiguous 0-based ids in order of first
appearance; each user's last rating by timestamp is held out as the test positive and the
rest are training positives; each user gets 999 test negatives drawn uniformly (with
replacement) from the items they never rated. Files (tab-separated, no header, as the
reference writes them despite the ``.csv`` names):

- ``train-ratings.csv``: ``user<TAB>item<TAB>1`` per training positive (by user, then time);
- ``test-ratings.csv``: ``user<TAB>item<TAB>1``, one line per user in user order;
- ``test-negative.csv``: 999 item ids per line, one line per user in user order.

`download` fetches ml-20m.zip from GroupLens and converts it. `synthesize` writes a
``ratings.csv`` of ``size`` users (20 or more ratings each, log-normal counts like the real
data's, items drawn with power-law popularity, non-contiguous movie ids, half-star ratings,
timestamps in 1995-2015) and converts it with the same :func:`convert`.

Loading: :func:`train_set` gives the training positives as tensors and the number of users
and items; :class:`TrainingTriples` turns them into the legacy NCF training set, each
positive followed by negatives drawn on the CPU as its items are read (in DataLoader
workers), and :class:`ShuffledBatches` reads it in a new random order at each pass.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milabench import datasets

NAME = "ml20m"
DEFAULT_SIZE = 138_493  # users in the real data
URL = "http://files.grouplens.org/datasets/movielens/ml-20m.zip"
MD5 = "cd245b17a1ae2cc31bb14903e1204af3"
RATINGS = "ratings.csv"
TRAIN_RATINGS = "train-ratings.csv"
TEST_RATINGS = "test-ratings.csv"
TEST_NEGATIVES = "test-negative.csv"
MIN_RATINGS = 20
TEST_NEGATIVE_COUNT = 999
REAL_ITEMS = 26_744  # movies with at least one rating in the real data
MIN_ITEMS = 1_000  # so that tiny synthetic sets still have items nobody rated
MAX_MOVIE_ID = 131_262
FIRST_TIME, LAST_TIME = 789_652_009, 1_427_784_002  # the real timestamps' range


def folder(root: Path) -> Path:
    return Path(root) / "ml-20m"


# -- conversion (the real data and the synthetic data go through it alike) -----------
def _negatives(task: tuple[Any, Any, range, int, int]) -> bytes:
    """Test negatives of a range of users: one tab-separated line of item ids per user."""
    import numpy as np

    indptr, rated, users, n_items, seed = task
    lines = []
    for user in users:
        seen = rated[indptr[user - users.start] : indptr[user - users.start + 1]]  # sorted
        rng = np.random.default_rng(datasets.item_seed(seed, "negatives", user))
        picks = rng.integers(n_items, size=TEST_NEGATIVE_COUNT)
        while True:  # rejection = uniform over the items this user never rated
            spot = seen.searchsorted(picks).clip(max=len(seen) - 1)
            bad = seen[spot] == picks
            if not bad.any():
                break
            picks[bad] = rng.integers(n_items, size=int(bad.sum()))
        lines.append("\t".join(map(str, picks.tolist())))
    return ("\n".join(lines) + "\n").encode() if lines else b""


def convert(base: Path, seed: int = 0, workers: int = 1) -> dict[str, int]:
    """``base/ratings.csv`` -> the three NCF files in ``base``; returns users/items/ratings."""
    import numpy as np
    import pandas as pd

    df = pd.read_csv(
        base / RATINGS,
        usecols=["userId", "movieId", "timestamp"],
        dtype={"userId": np.int64, "movieId": np.int64, "timestamp": np.int64},
    )
    df = df[df.groupby("userId")["userId"].transform("size") >= MIN_RATINGS]
    if df.empty:
        raise datasets.DataMissing(f"{base / RATINGS}: no user has {MIN_RATINGS} ratings")
    users, _ = pd.factorize(df["userId"])  # order of first appearance, like unique()
    items, item_ids = pd.factorize(df["movieId"])
    n_users, n_items = int(users.max()) + 1, len(item_ids)
    frame = pd.DataFrame({"user": users, "item": items, "timestamp": df["timestamp"].to_numpy()})
    # Time order; ties keep the file order (a stable sort, so the result is reproducible).
    frame = frame.sort_values("timestamp", kind="stable")
    frame = frame.sort_values("user", kind="stable")  # by user, in time order within
    last = ~frame["user"].duplicated(keep="last").to_numpy()
    train, test = frame[~last], frame[last]

    def ratings_bytes(part: Any) -> bytes:
        out = io.StringIO()
        part.assign(rating=1)[["user", "item", "rating"]].to_csv(
            out, sep="\t", header=False, index=False
        )
        return out.getvalue().encode()

    datasets.write_new(base / TRAIN_RATINGS, ratings_bytes(train), replace=True)
    datasets.write_new(base / TEST_RATINGS, ratings_bytes(test), replace=True)
    n_ratings = len(frame)

    # Every item a user rated (the held-out one too) is excluded from their negatives.
    order = np.lexsort((frame["item"].to_numpy(), frame["user"].to_numpy()))
    rated = frame["item"].to_numpy()[order]
    per_user = np.bincount(users, minlength=n_users)
    if per_user.max() >= n_items:
        raise datasets.DataMissing(f"{base / RATINGS}: a user rated every item (no negatives)")
    indptr = np.concatenate([[0], np.cumsum(per_user)])
    del df, frame, train, test, order, users, items, per_user  # the memory goes to the negatives
    tasks = [
        (
            indptr[r.start : r.stop + 1] - indptr[r.start],
            rated[indptr[r.start] : indptr[r.stop]],
            r,
            n_items,
            seed,
        )
        for r in datasets.chunks(n_users, 4 * max(1, workers))
    ]
    negatives = b"".join(datasets.parallel(_negatives, tasks, workers))
    datasets.write_new(base / TEST_NEGATIVES, negatives, replace=True)
    return {"users": n_users, "items": n_items, "ratings": n_ratings}


# -- synthesis ---------------------------------------------------------------------
def catalogue(size: int, seed: int) -> tuple[Any, Any]:
    """Movie ids by popularity rank (non-contiguous, like MovieLens') and the rank CDF."""
    import numpy as np

    n_items = max(MIN_ITEMS, round(size * REAL_ITEMS / DEFAULT_SIZE))
    rng = np.random.default_rng(datasets.item_seed(seed, "catalogue"))
    movie_ids = rng.choice(np.arange(1, max(MAX_MOVIE_ID, 2 * n_items) + 1), n_items, replace=False)
    # Power-law popularity: at the real size the top 10% of movies get ~3/4 of the draws
    # and the favourite ends up rated by about half the users, as in MovieLens.
    weights = (np.arange(n_items) + 50.0) ** -1.2
    cdf = np.cumsum(weights)
    return movie_ids, cdf / cdf[-1]


def _user_ratings(task: tuple[range, int, int]) -> bytes:
    """ratings.csv lines of a range of user ids (1-based), sorted by user then movie."""
    import numpy as np

    users, size, seed = task
    movie_ids, cdf = catalogue(size, seed)
    lines = []
    for user in users:
        rng = np.random.default_rng(datasets.item_seed(seed, "user", user))
        count = MIN_RATINGS + int(rng.lognormal(np.log(48), 1.3))
        count = min(count, len(movie_ids) // 2)
        chosen = np.empty(0, dtype=np.int64)
        while len(chosen) < count:  # distinct items, popular ones more often
            draws = np.concatenate([chosen, cdf.searchsorted(rng.random(2 * count))])
            _, first = np.unique(draws, return_index=True)
            chosen = draws[np.sort(first)]
        movies = np.sort(movie_ids[chosen[:count]])
        stars = (rng.normal(3.6, 1.0, size=count) * 2).round().clip(1, 10) / 2  # mean ~3.5
        span = min(int(rng.exponential(3e7)), LAST_TIME - FIRST_TIME)  # active ~a year
        start = rng.integers(FIRST_TIME, LAST_TIME - span + 1)
        times = start + rng.integers(0, span + 1, size=count)
        lines += [
            f"{user},{m},{s:.1f},{t}"
            for m, s, t in zip(movies.tolist(), stars.tolist(), times.tolist())
        ]
    return ("\n".join(lines) + "\n").encode() if lines else b""


def synthesize(root: Path, size: int = DEFAULT_SIZE, seed: int = 0, workers: int = 1) -> Path:
    """``size`` users' ratings in MovieLens' format, converted; deterministic for ``seed``.

    Finished data already in the folder is kept (see :func:`datasets.ready`).
    """
    base = folder(root)
    return datasets.synthesis(
        base,
        NAME,
        size,
        seed,
        unit="user",
        write=lambda: _write_synthetic(base, size, seed, workers),
    )


def _write_synthetic(base: Path, size: int, seed: int, workers: int) -> dict[str, int]:
    parts = [b"userId,movieId,rating,timestamp\n"]
    parts += datasets.map_chunks(
        _user_ratings, size, workers, lambda r: (range(r.start + 1, r.stop + 1), size, seed)
    )
    # No marker yet: files left by an interrupted run are stale; this process writes alone.
    datasets.write_new(base / RATINGS, b"".join(parts), replace=True)
    del parts
    return convert(base, seed=seed, workers=workers)


def download(root: Path) -> Path:
    """The real MovieLens-20M from GroupLens (ml-20m/*.csv), converted for NCF."""
    base = folder(root)
    return datasets.real_data(base, lambda: _fetch(Path(root), base))


def _fetch(root: Path, base: Path) -> dict[str, int]:
    archive = datasets.fetch(URL, base / "downloads" / "ml-20m.zip", md5=MD5)
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(root)  # ml-20m/ratings.csv, movies.csv, ...
    archive.unlink()
    archive.parent.rmdir()
    return convert(base, seed=0, workers=datasets.default_workers())


# -- loading -----------------------------------------------------------------------
@dataclass
class Ratings:
    """Training positives (LongTensors of equal length) and the id ranges."""

    users: Any
    items: Any
    nb_users: int
    nb_items: int

    def __len__(self) -> int:
        return len(self.users)


def _read_pairs(path: Path) -> Any:
    import numpy as np
    import pandas as pd

    table = pd.read_csv(path, sep="\t", header=None, usecols=[0, 1], dtype=np.int64)
    return table.to_numpy()


def train_set(root: Path) -> Ratings:
    """The training positives (fails with the command to run if the data is missing)."""
    import torch

    base = datasets.require(folder(root), NAME, Path(root))
    train, test = _read_pairs(base / TRAIN_RATINGS), _read_pairs(base / TEST_RATINGS)
    # Every mapped user and item is in train or test: their maxima give the id ranges.
    nb_users = int(max(train[:, 0].max(initial=-1), test[:, 0].max())) + 1
    nb_items = int(max(train[:, 1].max(initial=-1), test[:, 1].max())) + 1
    return Ratings(
        torch.from_numpy(train[:, 0].copy()),
        torch.from_numpy(train[:, 1].copy()),
        nb_users,
        nb_items,
    )


def evaluation_set(root: Path) -> tuple[Any, Any]:
    """(test positives as a users x 2 array of user, item; users x 999 negative items)."""
    import numpy as np

    base = datasets.require(folder(root), NAME, Path(root))
    negatives = np.loadtxt(base / TEST_NEGATIVES, dtype=np.int64, delimiter="\t", ndmin=2)
    return _read_pairs(base / TEST_RATINGS), negatives


class TrainingTriples:
    """The legacy NCF training set (a map-style torch Dataset): ``(1 + negatives) x
    positives`` (user, item, label) triples, the positive ``k`` at index ``k * (1 +
    negatives)`` followed by its negative slots; labels are float32 arrays of one value.

    A negative slot takes its positive's user and an item drawn uniformly, redrawn while it
    is one of that user's training positives (so its label 0 is always true), each time the
    slot is read: a new negative at every pass, drawn one item at a time with torch's
    generator, as the legacy loader did in its workers (the DataLoader seeds each worker
    from its own seed and the worker id: a run is deterministic for a seed and a worker
    count). The positives are looked up in a sorted array (legacy: a scipy dok_matrix, a
    dict of several GB for ML-20M).
    """

    def __init__(self, data: Ratings, negatives: int):
        import numpy as np

        # numpy, not tensors or lists: a scalar read is cheap and forked workers share the
        # pages (no reference counts written into them).
        self.users, self.items = data.users.numpy(), data.items.numpy()
        self.nb_users, self.nb_items = data.nb_users, data.nb_items
        self.slots = 1 + negatives
        self.known = np.unique(self.users * self.nb_items + self.items)  # sorted keys

    def __len__(self) -> int:
        return len(self.users) * self.slots

    def is_positive(self, user: int, item: int) -> bool:
        key = user * self.nb_items + item
        spot = int(self.known.searchsorted(key))
        return spot < len(self.known) and int(self.known[spot]) == key

    def __getitem__(self, index: int) -> tuple[int, int, Any]:
        import numpy as np
        import torch

        positive, slot = divmod(index, self.slots)
        user = int(self.users[positive])
        if slot == 0:
            return user, int(self.items[positive]), np.ones(1, dtype=np.float32)
        item = int(torch.randint(self.nb_items, (1,)).item())
        while self.is_positive(user, item):
            item = int(torch.randint(self.nb_items, (1,)).item())
        return user, item, np.zeros(1, dtype=np.float32)


class ShuffledBatches:
    """Batches of ``batch_size`` indices of a new random permutation of ``size`` at each
    pass (full batches only), for a DataLoader's ``batch_sampler``: what ``shuffle=True``
    reads, without its list of one Python int per triple (~4 GB for ML-20M's 100M)."""

    def __init__(self, size: int, batch_size: int, seed: int = 0):
        import torch

        self.size, self.batch_size = size, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.size // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        import torch

        order = torch.randperm(self.size, generator=self.generator)
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            yield order[start : start + self.batch_size].tolist()
