"""atari: PPO on Pong (no frame skip in the emulator) with the pytorch-a2c-ppo-acktr CNN.

Legacy counterpart: ``milarun/models/atari.py`` of mila-iqia/milabench at mila-ao-2020-2
(pytorch-a2c-ppo-acktr-gail, breuleux's milatweak branch, on the OpenAI baselines wrappers).

The baselines preprocessing: up to 30 no-op steps at reset, 4 frames per action with the max
of the last two, 84x84 grayscale (gymnasium's AtariPreprocessing does these three), the end
of a life ends the episode but not the game, FIRE pressed at reset by games that need it,
rewards clipped to their sign. Each environment steps in its own worker process and returns
its frame through shared memory (the legacy ShmemVecEnv); the last 4 frames of every
environment are stacked on the device, an episode's start zeroing its stack (the legacy
VecPyTorchFrameStack). The actor-critic is pytorch-a2c-ppo-acktr's CNNBase (conv 32x8s4,
64x4s2, 32x3s1, dense 512; orthogonal initialisation) with a policy and a value head. PPO
with the legacy profile's arguments (16 envs x 128 steps, 4 minibatches, 4 epochs, clip 0.1,
value 0.5, entropy 0.01, GAE 0.95, lr decaying linearly over 10M agent steps) and the atari
script's defaults (Adam lr 7e-4, eps 1e-5; the profile passed no --lr, and 2.5e-4 is the
PPO Atari rate of pytorch-a2c-ppo-acktr's README, not what the suite ran) is
``milabench.ppo``. Each timed iteration is one rollout and its update, and counts
--num-processes examples, as the legacy test did (its ``batch_size = num_processes``, "we
compute steps/sec"), so the 2020 baselines compare directly; the metric
``per_example.agent_steps`` (= --num-steps) gives the rate in agent steps (4 emulator frames
each). No dataset: the emulator makes the data (``synthetic_data`` stays null).

Differences left: ale-py's emulator and ROMs (legacy: gym 0.17's atari-py); the two frames
are max-pooled after the ALE's own grayscale conversion (baselines: in RGB, then converted);
frames are stacked and stored as uint8, the model dividing by 255 (legacy: float32); the
losses are not read (.item()) after each minibatch; environment i is seeded seed + i as the
legacy, but through gymnasium's seeding.
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

from milabench import helpers, ppo, rl
from milarun.experiment import BadTestArguments, Experiment

FRAMES = 4
SIZE = 84


def orthogonal(layer: nn.Module, gain: float) -> nn.Module:
    """Orthogonal weights and zero biases, the usual Atari actor-critic initialisation."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class AtariCNN(nn.Module):
    """Stacked 84x84 uint8 frames -> (action logits, state value); no memory."""

    def __init__(self, actions: int, frames: int = FRAMES):
        super().__init__()
        relu = math.sqrt(2)
        self.body = nn.Sequential(
            orthogonal(nn.Conv2d(frames, 32, 8, stride=4), relu),
            nn.ReLU(),
            orthogonal(nn.Conv2d(32, 64, 4, stride=2), relu),
            nn.ReLU(),
            orthogonal(nn.Conv2d(64, 32, 3, stride=1), relu),
            nn.ReLU(),
            nn.Flatten(),
            orthogonal(nn.Linear(32 * 7 * 7, 512), relu),
            nn.ReLU(),
        )
        self.policy = orthogonal(nn.Linear(512, actions), 0.01)
        self.value = orthogonal(nn.Linear(512, 1), 1.0)

    def forward(
        self, obs: torch.Tensor, memory: None = None
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        hidden = self.body(obs.float() / 255.0)
        return self.policy(hidden), self.value(hidden).squeeze(-1), None


# -- environments (built in the worker processes) -------------------------------------------
class EpisodicLife(gymnasium.Wrapper):
    """A lost life ends the episode for the learner, not the game: the next reset only
    steps a no-op unless the game really ended (baselines' EpisodicLifeEnv; gymnasium's
    terminal_on_life_loss would restart the game)."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.lives, self.game_over = 0, True

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> Any:
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, _, _, info = self.env.step(0)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gymnasium.Wrapper):
    """Press FIRE (then action 2) after each reset, for games that wait for it to start."""

    def reset(self, **kwargs: Any) -> Any:
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


def make_env(name: str, episodic_life: bool = True) -> gymnasium.Env:
    """One preprocessed Atari environment giving single 84x84 frames (module level, so the
    worker processes can unpickle it)."""
    gymnasium.register_envs(ale_py)
    # ALE/*-v5 games skip frames and repeat actions by default: turn both off, as the
    # NoFrameskip-v4 ids have it, since the preprocessing does the frame skipping.
    options = {"frameskip": 1, "repeat_action_probability": 0.0} if name.startswith("ALE/") else {}
    env = gymnasium.make(name, **options)
    env = gymnasium.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=SIZE)
    if episodic_life:
        env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    return gymnasium.wrappers.TransformReward(env, lambda r: float(np.sign(r)))


class FrameStack:
    """The last ``frames`` frames of every environment, kept on the device: each step moves
    one new frame per environment to it; an episode's start zeroes that environment's stack
    before its first frame goes in (as the legacy VecPyTorchFrameStack)."""

    def __init__(self, device: torch.device, frames: int = FRAMES):
        self.device, self.frames = device, frames
        self.stack: torch.Tensor | None = None

    def __call__(self, obs: np.ndarray, done: np.ndarray | None) -> torch.Tensor:
        frame = torch.from_numpy(obs).to(self.device, non_blocking=True)[:, None]
        if self.stack is None or done is None:
            self.stack = frame.new_zeros(frame.shape[0], self.frames, *frame.shape[2:])
        older = self.stack[:, 1:]
        if done is not None and done.any():
            keep = torch.from_numpy(~done).to(self.device, non_blocking=True)
            older = older * keep[:, None, None, None]
        # a new tensor each step: the rollout keeps the previous one
        self.stack = torch.cat((older, frame), 1)
        return self.stack


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--env-name",
        "--env",
        dest="env_name",
        default="PongNoFrameskip-v4",
        help="gymnasium Atari id (PongNoFrameskip-v4, ALE/Pong-v5, ...)",
    )
    parser.add_argument(
        "--episodic-life",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a lost life ends the learner's episode (baselines' default)",
    )
    parser.add_argument("--algo", default="ppo", choices=["ppo"], help="legacy flag: PPO only")
    ppo.add_ppo_arguments(
        parser,
        num_processes=16,
        num_steps=128,
        lr=7e-4,
        eps=1e-5,
        clip_param=0.1,
        use_gae=False,
        use_linear_lr_decay=False,
    )
    args = exp.parse_args(parser, argv)
    config = ppo.PPOConfig.from_args(args, minibatches=4)
    gymnasium.register_envs(ale_py)
    if args.env_name not in gymnasium.registry:
        raise BadTestArguments(
            f"bad test argument: --env-name {args.env_name} is not a "
            "registered gymnasium Atari environment"
        )
    device = helpers.setup(exp, args)
    exp.synthetic_data = None  # no dataset: the emulator generates the observations

    envs = rl.vector_env(
        functools.partial(make_env, args.env_name, args.episodic_life),
        args.num_processes,
        args.asynchronous,
    )
    with helpers.built_on(device):
        model = AtariCNN(envs.single_action_space.n).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, eps=args.eps)
    agent = ppo.PPO(
        envs,
        model,
        optimizer,
        config,
        args.num_steps,
        device,
        args.seed,
        observe=FrameStack(device),
    )
    ppo.train(exp, agent, args, counted=args.num_processes)
