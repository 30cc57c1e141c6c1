"""minigrid: PPO with babyai's FiLM actor-critic on BabyAI-UnlockPickup (minigrid package).

Legacy counterpart: ``milarun/models/minigrid.py`` of mila-iqia/milabench at mila-ao-2020-2,
which trained babyai's ``ACModel`` (arch ``expert_filmcnn``, GRU instructions, memory) with
``babyai.rl.PPOAlgo`` and the ``babyai.arguments`` defaults (breuleux/babyai master).

The model: the 7x7x3 egocentric view (object, colour, state codes as floats) goes through
conv 2x2 (128 channels, padding 1) + BatchNorm + ReLU + max-pool, conv 3x3 (128) + BatchNorm +
ReLU + max-pool; the mission's words (ids from a vocabulary built as the missions arrive, as
babyai does) go through an embedding and a GRU of 128, whose output at the last word
conditions two FiLM blocks (conv 3x3 + BatchNorm + ReLU, conv 3x3, x * gamma(instr) +
beta(instr), BatchNorm + ReLU; 128 channels); max-pool to 128 features, an LSTM cell memory
of 128, tanh MLP policy and value heads of 64. PPO as babyai: 64 environments x 40 frames,
minibatches of 1280 frames in sequences of 20 steps through the memory, 4 epochs, Adam lr
1e-4 (betas 0.9/0.999, eps 1e-5), GAE lambda 0.99, discount 0.99, clip 0.2, the unhalved
clipped value loss, no advantage normalisation, rewards x 20 (``milabench.ppo``). One example
is one environment frame; each timed iteration is one rollout and its update. The
environments step in worker processes. No dataset (``synthetic_data`` stays null).

Differences left: all 64 environments run in worker processes (babyai stepped the first in
the training process); the mission words are tokenised once per distinct mission (babyai ran
its regex on every observation, twice per frame) and padded to the longest mission of the
first observations, not to the longest of each batch; environment i is seeded seed + i
(babyai: 100 x seed + i); babyai's .item() of each loss at every step of a sequence (device
syncs) and its writes of the memory, which its loss never reads back, are left out.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
from typing import Any

import gymnasium
import minigrid  # noqa: F401  (registers the MiniGrid and BabyAI environments)
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from milabench import helpers, ppo, rl
from milarun.experiment import BadTestArguments, Experiment

VIEW = 7  # the agent's egocentric view is VIEW x VIEW cells
IMAGE = VIEW * VIEW * 3  # its codes, first in each packed observation
VOCAB = 100  # babyai's Vocabulary.max_size, the word embedding's rows
WIDTH = 128  # image, FiLM, instruction and memory dimensions (babyai defaults)
MAX_BYTES = 512  # longest mission text the worker processes pass back


def unit_rows(module: nn.Module) -> None:
    """babyai's initialisation of linear layers: each output's weights drawn normal then
    scaled to norm 1, zero bias (the convolutions and recurrent cells keep torch's)."""
    if isinstance(module, nn.Linear):
        weight = torch.randn_like(module.weight)
        module.weight.data.copy_(weight / weight.norm(dim=1, keepdim=True))
        nn.init.zeros_(module.bias)


# -- the mission --------------------------------------------------------------------------
class Vocabulary:
    """Word ids from 1 (0 pads) in the order the words first appear, as babyai's: the
    mission lower-cased, its words the runs of letters."""

    def __init__(self, capacity: int = VOCAB - 1):
        self.capacity = capacity
        self.ids: dict[str, int] = {}

    def encode(self, mission: str) -> list[int]:
        words = re.findall("[a-z]+", mission.lower())
        for word in words:
            if word not in self.ids:
                if len(self.ids) >= self.capacity:
                    raise RuntimeError(f"more than {self.capacity} distinct mission words")
                self.ids[word] = len(self.ids) + 1
        return [self.ids[w] for w in words]


class MissionBytes(gymnasium.ObservationWrapper):
    """The view and the mission's UTF-8 bytes, zero-padded: arrays the vector environment
    passes through shared memory (minigrid's MissionSpace it cannot, and gymnasium 1.x's
    shared Text is read once, at creation)."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.observation_space = gymnasium.spaces.Dict(
            {
                "image": env.observation_space["image"],
                "mission": gymnasium.spaces.Box(0, 255, (MAX_BYTES,), np.uint8),
            }
        )

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        text = observation["mission"].encode()
        if len(text) > MAX_BYTES:
            raise ValueError(f"a mission longer than {MAX_BYTES} bytes: {text[:80]!r}...")
        mission = np.zeros(MAX_BYTES, np.uint8)
        mission[: len(text)] = np.frombuffer(text, np.uint8)
        return {"image": observation["image"], "mission": mission}


def make_env(name: str) -> gymnasium.Env:
    """One environment (module level, so the worker processes can unpickle it)."""
    return MissionBytes(gymnasium.make(name))


class Observer:
    """The vector environment's observations -> (N, IMAGE + words) uint8 on the device: the
    view's codes then the mission's word ids, zero-padded to ``words`` (0: the longest
    mission of the first observations). One tensor, so the rollout stores it as any other."""

    def __init__(self, device: torch.device, words: int = 0):
        self.device, self.words = device, words
        self.vocabulary = Vocabulary()
        self.known: dict[bytes, list[int]] = {}  # the ids of each mission seen (few distinct)

    def tokens(self, mission: np.ndarray) -> list[int]:
        key = mission.tobytes()
        if key not in self.known:
            if len(self.known) > 4096:  # levels with endless mission variety
                self.known.clear()
            self.known[key] = self.vocabulary.encode(key.rstrip(b"\0").decode())
        return self.known[key]

    def __call__(self, obs: dict[str, Any], done: np.ndarray | None) -> torch.Tensor:
        ids = [self.tokens(m) for m in obs["mission"]]
        if not self.words:
            self.words = max(map(len, ids))
        packed = np.zeros((len(ids), IMAGE + self.words), np.uint8)
        packed[:, :IMAGE] = obs["image"].reshape(len(ids), IMAGE)
        for row, words in zip(packed, ids):
            if len(words) > self.words:
                raise BadTestArguments(
                    f"bad test argument: --instr-words {self.words} is "
                    f"shorter than a mission of {len(words)} words"
                )
            row[IMAGE : IMAGE + len(words)] = words
        return torch.from_numpy(packed).to(self.device, non_blocking=True)


# -- the model ----------------------------------------------------------------------------
def conv_bn(inputs: int, outputs: int, kernel: int) -> list[nn.Module]:
    return [nn.Conv2d(inputs, outputs, kernel, padding=1), nn.BatchNorm2d(outputs)]


class FiLM(nn.Module):
    """Two 3x3 convolutions whose second output is scaled and shifted per channel by linear
    maps of the instruction (feature-wise linear modulation)."""

    def __init__(self, channels: int = WIDTH, instr: int = WIDTH):
        super().__init__()
        self.conv1, self.bn1 = conv_bn(channels, channels, 3)
        self.conv2, self.bn2 = conv_bn(channels, channels, 3)
        self.gamma = nn.Linear(instr, channels)
        self.beta = nn.Linear(instr, channels)

    def forward(self, x: torch.Tensor, instr: torch.Tensor) -> torch.Tensor:
        x = self.conv2(F.relu(self.bn1(self.conv1(x))))
        x = x * self.gamma(instr)[:, :, None, None] + self.beta(instr)[:, :, None, None]
        return F.relu(self.bn2(x))


class FiLMActorCritic(nn.Module):
    """Packed observations (see Observer) and (N, 256) memories (the LSTM's h then c) ->
    (logits, values, new memories)."""

    memory_size = 2 * WIDTH

    def __init__(self, actions: int):
        super().__init__()
        self.image = nn.Sequential(
            *conv_bn(3, WIDTH, 2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            *conv_bn(WIDTH, WIDTH, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.words = nn.Embedding(VOCAB, WIDTH)
        self.instr = nn.GRU(WIDTH, WIDTH, batch_first=True)
        self.films = nn.ModuleList([FiLM(), FiLM()])
        self.pool = nn.MaxPool2d(2)
        self.memory = nn.LSTMCell(WIDTH, WIDTH)
        self.policy = nn.Sequential(nn.Linear(WIDTH, 64), nn.Tanh(), nn.Linear(64, actions))
        self.value = nn.Sequential(nn.Linear(WIDTH, 64), nn.Tanh(), nn.Linear(64, 1))
        self.apply(unit_rows)

    def instruction(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, words) ids -> (N, 128): the GRU's output at each mission's last word."""
        out, _ = self.instr(self.words(tokens))
        last = (tokens != 0).sum(1) - 1
        return out[torch.arange(tokens.shape[0], device=tokens.device), last]

    def features(self, image: torch.Tensor, instr: torch.Tensor) -> torch.Tensor:
        """(N, 7, 7, 3) views conditioned on (N, 128) instructions -> (N, 128)."""
        x = self.image(image.permute(0, 3, 1, 2).float())
        for film in self.films:
            x = film(x, instr)
        return F.relu(self.pool(x)).flatten(1)

    def forward(
        self, obs: torch.Tensor, memory: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        image = obs[:, :IMAGE].reshape(-1, VIEW, VIEW, 3)
        x = self.features(image, self.instruction(obs[:, IMAGE:].long()))
        h, c = self.memory(x, (memory[:, :WIDTH], memory[:, WIDTH:]))
        return self.policy(h), self.value(h).squeeze(-1), torch.cat((h, c), 1)


# -- the test -----------------------------------------------------------------------------
def non_negative(text: str) -> int:
    return 0 if text == "0" else helpers.positive_int(text)


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--env",
        "--env-name",
        dest="env",
        default="BabyAI-UnlockPickup-v0",
        help="a BabyAI (or MiniGrid) gymnasium id with a mission",
    )
    parser.add_argument(
        "--recurrence",
        type=helpers.positive_int,
        default=20,
        help="steps the gradient goes back through the memory",
    )
    parser.add_argument(
        "--reward-scale",
        type=float,
        default=20.0,
        help="the rewards are multiplied by this for training",
    )
    parser.add_argument("--beta1", type=float, default=0.9, help="Adam beta1")
    parser.add_argument("--beta2", type=float, default=0.999, help="Adam beta2")
    parser.add_argument(
        "--instr-words",
        type=non_negative,
        default=0,
        help="missions padded to this many words (0: the longest mission "
        "of the first observations)",
    )
    parser.add_argument("--algo", default="ppo", choices=["ppo"], help="legacy flag: PPO only")
    ppo.add_ppo_arguments(
        parser,
        num_processes=64,
        num_steps=40,
        lr=1e-4,
        eps=1e-5,
        gamma=0.99,
        use_gae=True,
        gae_lambda=0.99,
        clip_param=0.2,
    )
    args = exp.parse_args(parser, argv)
    config = ppo.PPOConfig.from_args(
        args, batch_size=1280, recurrence=args.recurrence, normalise_advantages=False
    )
    config = dataclasses.replace(config, reward_scale=args.reward_scale, value_factor=1.0)
    if args.env not in gymnasium.registry:
        raise BadTestArguments(
            f"bad test argument: --env {args.env} is not a registered gymnasium environment"
        )
    device = helpers.setup(exp, args)
    exp.synthetic_data = None  # no dataset: the environments generate the levels

    envs = rl.vector_env(
        functools.partial(make_env, args.env), args.num_processes, args.asynchronous
    )
    with helpers.built_on(device):
        model = FiLMActorCritic(envs.single_action_space.n).to(device)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=args.lr, eps=args.eps, betas=(args.beta1, args.beta2)
    )
    agent = ppo.PPO(
        envs,
        model,
        optimizer,
        config,
        args.num_steps,
        device,
        args.seed,
        memory_size=model.memory_size,
        observe=Observer(device, args.instr_words),
    )
    ppo.train(exp, agent, args)
