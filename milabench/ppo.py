"""PPO shared by the minigrid and atari tests: the agent (GAE over a rollout of N environments
x T steps, clipped surrogate, clipped value loss, entropy bonus, minibatches, epochs,
gradient-norm clipping, optional truncated back-propagation through a recurrent memory), its
losses, the optional linear learning-rate decay and the timed training loop. Its arguments
under the legacy flag names and its configuration: milabench.ppo_config (importable here).

One timed block (``helpers.train``) is one whole iteration, rollout and update, and counts the
environment steps it collected (atari: its N environments, the legacy unit). Policies are
``model(obs, memory) -> (logits, value, memory)`` with ``memory`` None for feed-forward ones.
"""

from __future__ import annotations

import argparse
from collections import deque
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

from milabench import helpers
from milabench.ppo_config import PPOConfig, add_ppo_arguments
from milabench.rl import gae, normalise, record_returns
from milarun.experiment import Experiment

__all__ = ["PPO", "PPOConfig", "add_ppo_arguments", "linear_decay", "ppo_losses", "train"]

# -- PPO ------------------------------------------------------------------------------------
# observe(observations of the vector env, the ``done`` flags of the step that gave them or None
# after the first reset) -> the model's (N, ...) input on the device; default: as a tensor.
Observe = Callable[[Any, "np.ndarray | None"], torch.Tensor]


class PPO:
    """Collects rollouts from a vector environment with ``model`` and updates it with PPO."""

    def __init__(
        self,
        envs: Any,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        config: PPOConfig,
        steps: int,
        device: torch.device,
        seed: int,
        memory_size: int = 0,
        observe: Observe | None = None,
    ):
        self.envs, self.model, self.optimizer, self.config = envs, model, optimizer, config
        self.device = device
        self.observe = observe or (lambda obs, done: self._tensor(obs))
        obs, _ = envs.reset(seed=seed)  # environment i gets seed + i
        self.obs = self.observe(obs, None)
        self.storage = self._storage(steps, envs.num_envs, memory_size)
        self.mask = torch.zeros(envs.num_envs, device=device)  # every env starts an episode
        self.memory = (
            torch.zeros(envs.num_envs, memory_size, device=device) if memory_size else None
        )
        self.running_return = np.zeros(envs.num_envs)
        self.episode_returns: deque[float] = deque(maxlen=100)
        self.stats: dict[str, torch.Tensor] = {}

    def _storage(self, steps: int, envs: int, memory_size: int) -> SimpleNamespace:
        """T x N of observations, actions and what the policy said of them. ``masks[t]`` is 0
        where ``obs[t]`` starts an episode; ``memories[t]`` is the (masked) memory given."""

        def zeros(*shape: int, dtype: Any = torch.float32) -> torch.Tensor:
            return torch.zeros(steps, envs, *shape, dtype=dtype, device=self.device)

        return SimpleNamespace(
            obs=zeros(*self.obs.shape[1:], dtype=self.obs.dtype),
            actions=zeros(dtype=torch.long),
            log_probs=zeros(),
            values=zeros(),
            rewards=zeros(),
            dones=zeros(),
            masks=zeros(),
            memories=zeros(memory_size) if memory_size else None,
        )

    @property
    def steps_per_iteration(self) -> int:
        return self.storage.obs.shape[0] * self.storage.obs.shape[1]

    def _tensor(self, array: Any) -> torch.Tensor:
        return torch.from_numpy(np.asarray(array)).to(self.device, non_blocking=True)

    def iteration(self) -> torch.Tensor:
        """Collect one rollout and update on it; the mean loss (not synchronised)."""
        self.collect()
        return self.update()["loss"]

    @torch.no_grad()
    def collect(self) -> None:
        """Step every environment ``T`` times with actions sampled from the policy."""
        store = self.storage
        for t in range(store.obs.shape[0]):
            memory = None if self.memory is None else self.memory * self.mask[:, None]
            logits, value, self.memory = self.model(self.obs, memory)
            # unvalidated, as torch 1.5 (2020): validation syncs the host twice a step
            dist = Categorical(logits=logits, validate_args=False)
            action = dist.sample()
            store.obs[t], store.masks[t] = self.obs, self.mask
            if memory is not None:
                store.memories[t] = memory
            store.actions[t], store.log_probs[t], store.values[t] = (
                action,
                dist.log_prob(action),
                value,
            )
            obs, reward, terminated, truncated, _ = self.envs.step(action.cpu().numpy())
            done = np.logical_or(terminated, truncated)
            store.rewards[t] = self._tensor((reward * self.config.reward_scale).astype(np.float32))
            store.dones[t] = self._tensor(done.astype(np.float32))
            self.obs, self.mask = self.observe(obs, done), 1.0 - store.dones[t]
            self.running_return += reward
            self.episode_returns.extend(self.running_return[done].tolist())
            self.running_return[done] = 0.0

    def update(self) -> dict[str, torch.Tensor]:
        """PPO epochs over minibatches of the last rollout; mean losses as device tensors."""
        cfg, store = self.config, self.storage
        with torch.no_grad():
            memory = None if self.memory is None else self.memory * self.mask[:, None]
            last_value = self.model(self.obs, memory)[1]
        advantages, returns = gae(
            store.rewards, store.values, store.dones, last_value, cfg.gamma, cfg.gae_lambda
        )

        def flat(x: torch.Tensor) -> torch.Tensor:
            # Environment-major, so a run of `recurrence` indexes is one env's consecutive steps.
            return x.transpose(0, 1).reshape(-1, *x.shape[2:])

        obs, actions, old_log_probs, old_values, masks = map(
            flat, (store.obs, store.actions, store.log_probs, store.values, store.masks)
        )
        memories = None if store.memories is None else flat(store.memories)
        advantages, returns = flat(advantages), flat(returns)
        if cfg.normalise_advantages:
            advantages = normalise(advantages)
        data = (obs, actions, old_log_probs, old_values, advantages, returns)
        starts = torch.arange(0, obs.shape[0], cfg.recurrence, device=self.device)
        totals = {
            k: torch.zeros((), device=self.device)
            for k in ("loss", "policy_loss", "value_loss", "entropy")
        }
        for _ in range(cfg.epochs):
            order = starts[torch.randperm(starts.shape[0], device=self.device)]
            for batch in order.split(starts.shape[0] // cfg.minibatches):
                parts = self._losses(batch, data, masks, memories)
                self.optimizer.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
                parts["loss"].backward()
                nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for k in totals:
                    totals[k] += parts[k].detach()
        updates = cfg.epochs * cfg.minibatches
        self.stats = {k: v / updates for k, v in totals.items()}
        return self.stats

    def _losses(
        self,
        batch: torch.Tensor,
        data: tuple[torch.Tensor, ...],
        masks: torch.Tensor,
        memories: torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        """The losses of the sequences starting at ``batch``, averaged over their steps; the
        memory flows (with gradients) from each step to the next, reset at episode starts."""
        cfg = self.config
        memory = None if memories is None else memories[batch]
        parts: dict[str, Any] = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0}
        for i in range(cfg.recurrence):
            index = batch + i
            if memory is not None and i:
                memory = memory * masks[index, None]
            obs, actions, *rest = (x[index] for x in data)
            logits, value, memory = self.model(obs, memory)
            for k, v in ppo_losses(
                logits, value, actions, *rest, cfg.clip, cfg.value_factor
            ).items():
                parts[k] = parts[k] + v / cfg.recurrence
        parts["loss"] = (
            parts["policy_loss"]
            + cfg.value_coef * parts["value_loss"]
            - cfg.entropy_coef * parts["entropy"]
        )
        return parts


def ppo_losses(
    logits: torch.Tensor,
    value: torch.Tensor,
    actions: torch.Tensor,
    old_log_probs: torch.Tensor,
    old_values: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    clip: float,
    value_factor: float = 0.5,
) -> dict[str, torch.Tensor]:
    """Clipped surrogate (to minimise), clipped value loss (``value_factor`` x the larger
    squared error) and the policy's mean entropy."""
    dist = Categorical(logits=logits, validate_args=False)
    ratio = torch.exp(dist.log_prob(actions) - old_log_probs)
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
    clipped_value = old_values + (value - old_values).clamp(-clip, clip)
    value_loss = value_factor * torch.max((value - returns) ** 2, (clipped_value - returns) ** 2)
    return {
        "policy_loss": -surrogate.mean(),
        "value_loss": value_loss.mean(),
        "entropy": dist.entropy().mean(),
    }


# The reference PPO code decays the rate over its --num-env-steps (10M by default), not
# over the benchmark's run, whose length is decided by measurement.
LR_DECAY_ENV_STEPS = 10_000_000


def linear_decay(optimizer: torch.optim.Optimizer, base_lr: float, update: int, total: int) -> None:
    """Learning rate ``base_lr * (1 - update / total)``, never below 0 (update 0 gets the
    full rate)."""
    for group in optimizer.param_groups:
        group["lr"] = base_lr * max(0.0, 1.0 - update / max(total, 1))


def train(
    exp: Experiment,
    agent: PPO,
    args: argparse.Namespace,
    counted: int | None = None,
    natural: str = "agent_steps",
) -> None:
    """Timed PPO iterations until the run is long enough (helpers.train), with the optional
    LR decay; records the mean losses of the last update and the mean return of the last
    100 episodes.

    Each iteration counts ``counted`` examples (the test's legacy unit) or, by default, its
    environment steps. A test counting otherwise records how many ``natural`` units (the
    environment steps) one counted example is, as the metric ``per_example.<natural>``.
    """
    steps = agent.steps_per_iteration
    if counted is not None:
        exp.metric(f"per_example.{natural}", steps / counted)
    total = LR_DECAY_ENV_STEPS // steps  # the decay follows environment steps, whatever counts
    done = 0

    def step() -> torch.Tensor:
        nonlocal done
        if args.use_linear_lr_decay:
            linear_decay(agent.optimizer, args.lr, done, total)
        done += 1
        return agent.iteration()

    helpers.train(exp, step, counted or steps)
    for name in ("policy_loss", "value_loss", "entropy"):
        exp.metric(name, agent.stats[name].item())
    record_returns(exp, agent.episode_returns)
    agent.envs.close()
