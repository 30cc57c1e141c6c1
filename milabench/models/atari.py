"""atari: PPO on Pong (no frame skip in the emulator) with the Nature DQN network.

The usual DeepMind preprocessing (gymnasium's AtariPreprocessing: up to 30 no-op steps at
reset, 4 frames per action with the max of the last two, 84x84 grayscale; optionally the end
of a life ends the episode), FIRE pressed at reset by games that need it, rewards clipped to
their sign, the last 4 frames stacked. The actor-critic is the Nature Atari CNN (conv 32x8s4,
64x4s2, 64x3s1, dense 512) with a policy and a value head. PPO with the legacy arguments
(16 envs x 128 steps, 4 minibatches, clip 0.1, value 0.5, entropy 0.01, lr 2.5e-4 decaying
linearly, GAE 0.95) is ``milabench.rl``. Each timed iteration is one rollout and its update,
and counts --num-processes examples, as the legacy test did (its ``batch_size =
num_processes``, "we compute steps/sec"), so the 2020 baselines compare directly; the metric
``per_example.agent_steps`` (= --num-steps) gives the rate in agent steps (4 emulator frames
each). No dataset: the emulator makes the data (``synthetic_data`` stays null).
"""

from __future__ import annotations

import argparse
import functools
import math
from typing import Any

import ale_py
import gymnasium
import numpy as np
import torch
from torch import nn

from milabench import helpers, rl
from milarun.experiment import BadTestArguments, Experiment

FRAMES = 4


def orthogonal(layer: nn.Module, gain: float) -> nn.Module:
    """Orthogonal weights and zero biases, the usual Atari actor-critic initialisation."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class NatureCNN(nn.Module):
    """Stacked 84x84 uint8 frames -> (action logits, state value); no memory."""

    def __init__(self, actions: int, frames: int = FRAMES):
        super().__init__()
        relu = math.sqrt(2)
        self.body = nn.Sequential(
            orthogonal(nn.Conv2d(frames, 32, 8, stride=4), relu), nn.ReLU(),
            orthogonal(nn.Conv2d(32, 64, 4, stride=2), relu), nn.ReLU(),
            orthogonal(nn.Conv2d(64, 64, 3, stride=1), relu), nn.ReLU(),
            nn.Flatten(),
            orthogonal(nn.Linear(64 * 7 * 7, 512), relu), nn.ReLU(),
        )
        self.policy = orthogonal(nn.Linear(512, actions), 0.01)
        self.value = orthogonal(nn.Linear(512, 1), 1.0)

    def forward(self, obs: torch.Tensor, memory: None = None
                ) -> tuple[torch.Tensor, torch.Tensor, None]:
        hidden = self.body(obs.float() / 255.0)
        return self.policy(hidden), self.value(hidden).squeeze(-1), None


class FireReset(gymnasium.Wrapper):
    """Press FIRE (then action 2) after each reset, for games that wait for it to start."""

    def reset(self, **kwargs: Any) -> Any:
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


def make_env(name: str, episodic_life: bool) -> Any:
    """One preprocessed Atari environment (module level, so AsyncVectorEnv can pickle it)."""
    gymnasium.register_envs(ale_py)
    # ALE/*-v5 games skip frames and repeat actions by default: turn both off, as the
    # NoFrameskip-v4 ids have it, since the preprocessing does the frame skipping.
    options = {"frameskip": 1, "repeat_action_probability": 0.0} if name.startswith("ALE/") else {}
    env = gymnasium.make(name, **options)
    env = gymnasium.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84,
                                                terminal_on_life_loss=episodic_life)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    env = gymnasium.wrappers.TransformReward(env, lambda r: float(np.sign(r)))
    return gymnasium.wrappers.FrameStackObservation(env, FRAMES)


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env-name", "--env", dest="env_name", default="PongNoFrameskip-v4",
                        help="gymnasium Atari id (PongNoFrameskip-v4, ALE/Pong-v5, ...)")
    parser.add_argument("--episodic-life", action="store_true",
                        help="losing a life ends the episode (for the returns)")
    parser.add_argument("--algo", default="ppo", choices=["ppo"], help="legacy flag: PPO only")
    rl.add_ppo_arguments(parser, num_processes=16, num_steps=128, lr=2.5e-4, eps=1e-5,
                         clip_param=0.1, use_gae=False, use_linear_lr_decay=False)
    args = exp.parse_args(parser, argv)
    config = rl.PPOConfig.from_args(args, minibatches=4)
    gymnasium.register_envs(ale_py)
    if args.env_name not in gymnasium.registry:
        raise BadTestArguments(f"bad test argument: --env-name {args.env_name} is not a "
                               "registered gymnasium Atari environment")
    device = helpers.setup(exp, args)
    exp.synthetic_data = None  # no dataset: the emulator generates the observations

    envs = rl.vector_env(functools.partial(make_env, args.env_name, args.episodic_life),
                         args.num_processes, args.asynchronous)
    model = NatureCNN(envs.single_action_space.n).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, eps=args.eps)
    agent = rl.PPO(envs, model, optimizer, config, args.num_steps, device, args.seed)
    rl.train(exp, agent, args, counted=args.num_processes)

