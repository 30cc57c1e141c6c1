"""minigrid: PPO with a recurrent actor-critic on BabyAI-UnlockPickup (minigrid package).

The agent sees its 7x7x3 egocentric view (object, colour, state codes); the mission text is
ignored (in UnlockPickup it always names the one box of the level, so it carries nothing the
view lacks). The network follows the rl-starter-files ACModel with memory: a small CNN
(conv 16x2, max-pool 2, conv 32x2, conv 64x2 -> 64 features), a GRU cell memory of 64, and
tanh MLP policy and value heads of 64. PPO with the torch-ac defaults (16 envs x 128 frames,
Adam lr 1e-3, GAE 0.95, clip 0.2, 4 epochs of 256-frame minibatches, gradients through 4
steps of memory) is ``milabench.rl``. One example is one environment frame; each timed
iteration is one rollout and its update. No dataset (``synthetic_data`` stays null).
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import gymnasium
import minigrid  # noqa: F401  (registers the MiniGrid and BabyAI environments)
import torch
from minigrid.wrappers import ImgObsWrapper
from torch import nn

from milabench import helpers, rl
from milarun.experiment import BadTestArguments, Experiment

FEATURES = 64  # the CNN's output on a 7x7 view, and the memory size


def unit_rows(module: nn.Module) -> None:
    """torch-ac's initialisation: each output's weights drawn normal then scaled to norm 1."""
    if isinstance(module, nn.Linear):
        weight = torch.randn_like(module.weight)
        module.weight.data.copy_(weight / weight.norm(dim=1, keepdim=True))
        nn.init.zeros_(module.bias)


class RecurrentActorCritic(nn.Module):
    """(N, 7, 7, 3) uint8 views and (N, 64) memories -> (logits, values, new memories)."""

    memory_size = FEATURES

    def __init__(self, actions: int):
        super().__init__()
        self.image = nn.Sequential(
            nn.Conv2d(3, 16, 2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 2), nn.ReLU(),
            nn.Conv2d(32, FEATURES, 2), nn.ReLU(),
            nn.Flatten(),
        )
        self.memory = nn.GRUCell(FEATURES, FEATURES)
        self.policy = nn.Sequential(nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, actions))
        self.value = nn.Sequential(nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, 1))
        self.apply(unit_rows)

    def forward(self, obs: torch.Tensor, memory: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        features = self.image(obs.permute(0, 3, 1, 2).float())
        memory = self.memory(features, memory)
        return self.policy(memory), self.value(memory).squeeze(-1), memory


def make_env(name: str) -> Any:
    """One environment giving only the image part of the observation (picklable)."""
    return ImgObsWrapper(gymnasium.make(name))


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", "--env-name", dest="env", default="BabyAI-UnlockPickup-v0",
                        help="a MiniGrid or BabyAI gymnasium id")
    parser.add_argument("--recurrence", type=helpers.positive_int, default=4,
                        help="steps the gradient goes back through the memory")
    parser.add_argument("--algo", default="ppo", choices=["ppo"], help="legacy flag: PPO only")
    rl.add_ppo_arguments(parser, num_processes=16, num_steps=128, lr=1e-3, eps=1e-8,
                         clip_param=0.2, use_gae=True)
    args = exp.parse_args(parser, argv)
    config = rl.PPOConfig.from_args(args, batch_size=256, recurrence=args.recurrence,
                                    normalise_advantages=False)
    if args.env not in gymnasium.registry:
        raise BadTestArguments(f"bad test argument: --env {args.env} is not a registered "
                               "gymnasium environment")
    device = helpers.setup(exp, args)
    exp.synthetic_data = None  # no dataset: the environments generate the levels

    envs = rl.vector_env(functools.partial(make_env, args.env), args.num_processes,
                         args.asynchronous)
    model = RecurrentActorCritic(envs.single_action_space.n).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, eps=args.eps)
    agent = rl.PPO(envs, model, optimizer, config, args.num_steps, device, args.seed,
                   memory_size=model.memory_size)
    rl.train(exp, agent, args)
