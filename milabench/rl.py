"""Reinforcement learning shared by the cart, minigrid and atari tests: discounted returns
(REINFORCE), GAE, gymnasium vector environments and the episode returns' metric. PPO, on top
of these, is milabench.ppo."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import torch

from milarun.experiment import Experiment


# -- returns ------------------------------------------------------------------------------
def discounted_returns(rewards: torch.Tensor, dones: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma * G_{t+1}, restarting after each step whose ``dones`` is set.

    ``rewards`` and ``dones`` have time as their first dimension; the last step is treated
    as the end of its episode (nothing is bootstrapped).
    """
    returns = torch.empty_like(rewards, dtype=torch.float32)
    running = torch.zeros_like(rewards[0], dtype=torch.float32)
    keep = 1.0 - dones.float()
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * running * keep[t]
        returns[t] = running
    return returns


def normalise(x: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit standard deviation (float32 epsilon keeps a constant input finite)."""
    return (x - x.mean()) / (x.std() + torch.finfo(torch.float32).eps)


def reinforce_loss(
    log_probs: torch.Tensor, rewards: torch.Tensor, dones: torch.Tensor, gamma: float
) -> torch.Tensor:
    """REINFORCE: -sum_t log pi(a_t|s_t) G_t with the returns normalised over the batch."""
    return -(log_probs * normalise(discounted_returns(rewards, dones, gamma))).sum()


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over (T, N) tensors; returns (advantages, returns).

    delta_t = r_t + gamma V_{t+1} (1 - done_t) - V_t and A_t = delta_t + gamma lam
    (1 - done_t) A_{t+1}, with V_T = ``last_value``; returns = A + V. ``lam`` = 1 gives the
    discounted returns bootstrapped from ``last_value`` (the legacy run without --use-gae).
    """
    advantages = torch.empty_like(values)
    running = torch.zeros_like(last_value)
    next_value = last_value
    for t in range(rewards.shape[0] - 1, -1, -1):
        keep = 1.0 - dones[t].float()
        delta = rewards[t] + gamma * next_value * keep - values[t]
        running = delta + gamma * lam * keep * running
        advantages[t] = running
        next_value = values[t]
    return advantages, advantages + values


# -- environments -------------------------------------------------------------------------
def vector_env(make_one: Callable[[], Any], count: int, asynchronous: bool = False) -> Any:
    """``count`` copies of ``make_one()`` stepped together, reset in the step that ends them.

    ``asynchronous``: one worker process per environment, all stepping at once, observations
    returned through shared memory (the legacy tests' subprocess vector envs); else every
    environment steps in turn in this process.
    """
    kind = gymnasium.vector.AsyncVectorEnv if asynchronous else gymnasium.vector.SyncVectorEnv
    return kind([make_one] * count, autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)


def record_returns(exp: Experiment, returns: Any) -> None:
    """The mean return of the finished episodes, when any finished (else no metric)."""
    if len(returns):
        exp.metric("episode_return", float(np.mean(returns)))
