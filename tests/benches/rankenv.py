"""A benchmark that refuses to run when it sees a torchrun rank variable: an instance
launched on its own must never believe it is one rank of a distributed job."""

import os

from faulty import _spin_steps

RANK_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def no_rank_variables(exp, argv):
    seen = sorted(k for k in os.environ if k in RANK_VARIABLES or k.startswith("TORCHELASTIC_"))
    if seen:
        raise RuntimeError(
            "rank variables in a single instance: "
            + ", ".join(f"{k}={os.environ[k]}" for k in seen)
        )
    _spin_steps(exp, argv)
