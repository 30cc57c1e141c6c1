"""cart: REINFORCE on gymnasium's CartPole-v0, as in the PyTorch reinforcement-learning example.

A policy MLP 4-128-2 (ReLU, then a softmax: the legacy network, with no dropout module)
gives the action probabilities; one action is sampled per step. One iteration plays episodes
from a fresh reset (CartPole-v0 ends them at 200 steps) until ``--episode-length`` (500, as
the legacy run) steps were taken, the last episode cut there, then makes one Adam step on the
REINFORCE loss: -sum(log pi(a_t|s_t) * G_t) with the discounted returns G_t of each episode,
normalised over the iteration. One example is one environment step.

It always runs on the CPU, like the legacy ``--no-cuda``: a 4-128-2 network on one state at a
time is dominated by the environment and Python, and a GPU would only add a transfer per step.
On a GPU slot its rate log syncs the CPU (a no-op): the slot's GPU is never initialised.
No dataset (``synthetic_data`` stays null). One torch thread, as the legacy CPU run.

Legacy counterpart: milarun/models/cart_pole.py (mila-ao-2020-2), whose ``action.item()``
each environment step is the same host read as here. As there, the distribution is built
from the probabilities and its arguments are not validated (torch.distributions validates
them by default since torch 1.8; the legacy ran torch 1.5, where it did not): both are per-step
Python work in a test that is all per-step Python work. Left: gymnasium's CartPole-v0 (legacy:
gym's); the legacy returns ran on across episode ends within an iteration (here they restart
at each end, as the example meant): the same work.
"""

from __future__ import annotations

import argparse

import gymnasium
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical

from milabench import helpers, rl
from milarun.experiment import BadTestArguments, Experiment


class Policy(nn.Module):
    """State -> action probabilities (4-128-2 on the cart-pole, a softmax out, as the legacy).

    ``dropout`` > 0 adds a dropout layer after the hidden one (the PyTorch example's 0.6);
    at 0, the legacy's, there is no dropout module at all (not even an identity one).
    """

    def __init__(self, inputs: int = 4, actions: int = 2, hidden: int = 128, dropout: float = 0.0):
        super().__init__()
        self.hidden = nn.Linear(inputs, hidden)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        self.out = nn.Linear(hidden, actions)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.hidden(state))
        if self.dropout is not None:
            h = self.dropout(h)
        return F.softmax(self.out(h), dim=1)


def play(
    env: gymnasium.Env, policy: Policy, steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[float]]:
    """``steps`` steps from a reset (episodes restart when they end): the log-probabilities of
    the actions taken, the rewards, the episode ends and the returns of finished episodes."""
    log_probs, rewards, dones, finished = [], [], [], []
    state, _ = env.reset()
    total = 0.0
    for _ in range(steps):
        probs = policy(torch.from_numpy(state).float().unsqueeze(0))
        dist = Categorical(probs=probs, validate_args=False)  # as torch 1.5: no validation
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
        state, reward, terminated, truncated, _ = env.step(action.item())
        total += float(reward)
        rewards.append(float(reward))
        dones.append(terminated or truncated)
        if dones[-1]:
            finished.append(total)
            total = 0.0
            state, _ = env.reset()
    return torch.cat(log_probs), torch.tensor(rewards), torch.tensor(dones), finished


def main(exp: Experiment, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--env-name",
        "--env",
        dest="env_name",
        default="CartPole-v0",
        help="a gymnasium id with a vector state and discrete actions",
    )
    parser.add_argument("--gamma", type=float, default=0.99, help="discount factor")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate")
    parser.add_argument("--dropout", type=float, default=0.0, help="legacy: none")
    parser.add_argument(
        "--episode-length",
        type=helpers.positive_int,
        default=500,
        help="environment steps per update",
    )
    parser.add_argument("--no-render", action="store_true", help="legacy flag (never renders)")
    parser.add_argument("--no-cuda", action="store_true", help="legacy flag (always the CPU)")
    args = exp.parse_args(parser, argv)
    if not 0 <= args.dropout < 1:
        raise BadTestArguments(f"bad test argument: --dropout {args.dropout} (in [0, 1))")
    if args.env_name not in gymnasium.registry:
        raise BadTestArguments(
            f"bad test argument: --env-name {args.env_name} is not a "
            "registered gymnasium environment"
        )
    device = helpers.setup(exp, args, torch.device("cpu"))  # see the module docstring
    torch.set_num_threads(1)  # the legacy init_torch's default for a CPU run
    exp.synthetic_data = None  # no dataset: the simulator generates the states

    env = gymnasium.make(args.env_name)
    env.reset(seed=args.seed)  # later resets continue this generator
    policy = Policy(env.observation_space.shape[0], env.action_space.n, dropout=args.dropout).to(
        device
    )
    policy.train()
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    episode_returns: list[float] = []

    def step() -> torch.Tensor:
        log_probs, rewards, dones, finished = play(env, policy, args.episode_length)
        episode_returns.extend(finished)
        loss = rl.reinforce_loss(log_probs, rewards, dones, args.gamma)
        optimizer.zero_grad(set_to_none=False)  # in place, as torch 1.5 (2020)
        loss.backward()
        optimizer.step()
        return loss.detach()

    helpers.train(exp, step, args.episode_length)
    rl.record_returns(exp, episode_returns[-100:])
    env.close()
