"""`milarun dataset`: fetch the real data of datasets, or synthesise it offline.

The CLI imports this module only inside its `dataset` command (the harness never imports
milabench otherwise); every error the operator can fix is raised as :class:`Refused`, one
line naming the dataset and what to do.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from milabench import datasets


class Refused(ValueError):
    """A dataset request that cannot be carried out, with what to do instead."""


def make(
    specs: list[str],
    root: Path,
    synthetic: bool = False,
    size: int | None = None,
    seed: int = 0,
    workers: int | None = None,
) -> Iterator[str]:
    """Download (or, with ``synthetic``, generate) each dataset into ``root``; yields one
    line per dataset saying what is where."""
    if size is not None and size < 1:
        raise Refused(f"--size {size}: must be at least 1")
    if size is not None and not synthetic:
        raise Refused("--size only applies to --synthetic data")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise Refused(
            f"data folder '{root}' cannot be created ({err.strerror or err}); "
            "pass -d with a folder you can write"
        ) from err
    for spec in specs:
        try:
            module = datasets.resolve(spec)
            if synthetic:
                folder = module.synthesize(
                    root,
                    size or module.DEFAULT_SIZE,
                    seed=seed,
                    workers=workers or datasets.default_workers(),
                )
            else:
                folder = module.download(root)
        except datasets.DataMissing as err:
            raise Refused(str(err)) from err
        except OSError as err:  # network or disk: say which dataset and what to do
            hint = (
                f"check the free space and permissions of {root}"
                if synthetic
                else "check the network and the free space (or use --synthetic)"
            )
            raise Refused(f"{spec}: {err}; {hint}") from err
        yield f"{spec}: {datasets.describe(folder)} in {folder}"
