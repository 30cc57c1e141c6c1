"""PPO shared by the minigrid and atari tests: the PPO arguments under the legacy flag names,
its configuration, the agent (GAE over a rollout of N environments x T steps, clipped
surrogate, clipped value loss, entropy bonus, minibatches, epochs, gradient-norm clipping,
optional truncated back-propagation through a recurrent memory), its losses, the optional
linear learning-rate decay and the timed training loop.

One timed block (``helpers.train``) is one whole iteration, rollout and update, and counts the
environment steps it collected (atari: its N environments, the legacy unit). Policies are
``model(obs, memory) -> (logits, value, memory)`` with ``memory`` None for feed-forward ones.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import deque
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

from milabench import helpers
from milabench.rl import gae, normalise, record_returns
from milarun.experiment import BadTestArguments, Experiment


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
