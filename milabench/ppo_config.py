"""PPO's arguments under the legacy flag names (atari's pytorch-a2c-ppo-acktr, minigrid's
babyai/torch-ac) and the configuration of one update made of them (milabench.ppo runs it)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from milabench import helpers
from milarun.experiment import BadTestArguments


# -- arguments ----------------------------------------------------------------------------
def add_ppo_arguments(parser: argparse.ArgumentParser, **defaults: Any) -> None:
    """The PPO flags, under the legacy atari names and the minigrid (babyai/torch-ac) ones.

    ``defaults`` overrides the defaults (e.g. ``num_processes=16, clip_param=0.1``).
    Minibatches come from --num-mini-batch (a count) or --batch-size (frames each), not both.
    """
    add = parser.add_argument
    add(
        "--num-processes",
        "--procs",
        "--num-envs",
        dest="num_processes",
        type=helpers.positive_int,
        default=16,
        help="environments stepped together",
    )
    add(
        "--num-steps",
        "--frames-per-proc",
        dest="num_steps",
        type=helpers.positive_int,
        default=128,
        help="steps of each environment per update",
    )
    add("--lr", type=float, default=2.5e-4, help="Adam learning rate")
    add("--eps", "--optim-eps", dest="eps", type=float, default=1e-5, help="Adam epsilon")
    add("--gamma", "--discount", dest="gamma", type=float, default=0.99, help="discount factor")
    add("--use-gae", action="store_true", help="GAE advantages (else lambda = 1)")
    add("--gae-lambda", type=float, default=0.95, help="GAE lambda")
    add(
        "--clip-param",
        "--clip-eps",
        dest="clip_param",
        type=float,
        default=0.2,
        help="PPO ratio clip (and value clip)",
    )
    add("--value-loss-coef", type=float, default=0.5, help="value loss coefficient")
    add("--entropy-coef", type=float, default=0.01, help="entropy bonus coefficient")
    add("--max-grad-norm", type=float, default=0.5, help="gradient norm clip")
    add(
        "--ppo-epoch",
        "--ppo-epochs",
        "--epochs",
        dest="ppo_epoch",
        type=helpers.positive_int,
        default=4,
        help="PPO epochs over each rollout",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--num-mini-batch", type=helpers.positive_int, default=None, help="minibatches per epoch"
    )
    group.add_argument(
        "--batch-size", type=helpers.positive_int, default=None, help="frames per minibatch"
    )
    add(
        "--use-linear-lr-decay",
        action="store_true",
        help="learning rate decays linearly to 0 over 10M environment steps (the "
        "reference script's --num-env-steps)",
    )
    add(
        "--async",
        dest="asynchronous",
        action="store_true",
        help="one process per environment (AsyncVectorEnv, the default)",
    )
    add(
        "--sync",
        dest="asynchronous",
        action="store_false",
        help="step every environment in turn in this process instead (not the legacy load)",
    )
    parser.set_defaults(asynchronous=True, **defaults)


@dataclasses.dataclass
class PPOConfig:
    """What one PPO update does."""

    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    epochs: int = 4
    minibatches: int = 4
    max_grad_norm: float = 0.5
    recurrence: int = 1
    reward_scale: float = 1.0  # babyai trains on 20 x the reward (the returns stay unscaled)
    # pytorch-a2c-ppo-acktr halves the squared value error, babyai does not
    value_factor: float = 0.5
    # pytorch-a2c-ppo-acktr normalises the advantages of each rollout, torch-ac does not
    # (with sparse rewards the normalised noise of an untrained critic would drive the policy).
    normalise_advantages: bool = True

    @classmethod
    def from_args(
        cls,
        args: argparse.Namespace,
        minibatches: int | None = None,
        batch_size: int | None = None,
        recurrence: int = 1,
        normalise_advantages: bool = True,
    ) -> PPOConfig:
        """From :func:`add_ppo_arguments`' flags; the given default minibatching applies when
        neither --num-mini-batch nor --batch-size was given. Checks that the rollout splits."""
        frames = args.num_processes * args.num_steps
        if args.num_mini_batch is None and args.batch_size is None:
            args.num_mini_batch, args.batch_size = minibatches, batch_size
        if args.batch_size is not None:
            if args.batch_size > frames or frames % args.batch_size or args.batch_size % recurrence:
                raise BadTestArguments(
                    f"bad test argument: --batch-size {args.batch_size} must divide the "
                    f"{frames} frames of a rollout and be a multiple of --recurrence {recurrence}"
                )
            count = frames // args.batch_size
        else:
            count = args.num_mini_batch
        sequences = frames // recurrence
        if args.num_steps % recurrence or count > sequences or sequences % count:
            raise BadTestArguments(
                f"bad test argument: {args.num_processes} envs x {args.num_steps} steps do not "
                f"split into {count} minibatches of whole {recurrence}-step sequences"
            )
        return cls(
            gamma=args.gamma,
            gae_lambda=args.gae_lambda if args.use_gae else 1.0,
            clip=args.clip_param,
            value_coef=args.value_loss_coef,
            entropy_coef=args.entropy_coef,
            epochs=args.ppo_epoch,
            minibatches=count,
            max_grad_norm=args.max_grad_norm,
            recurrence=recurrence,
            normalise_advantages=normalise_advantages,
        )
