"""The RL pieces (REINFORCE returns, GAE, PPO losses and arguments, environments stepped in
worker processes), what makes minigrid and atari their legacy workloads (babyai's FiLM model
conditioned on the mission, its memory; the pytorch-a2c-ppo-acktr CNN, the frame stack on the
device), and the cart, minigrid and atari tests run through the real ``milarun run`` CLI with
tiny rollouts and 2 environments.

The models run on the CPU with one torch thread, like one CPU slice. They have no dataset:
the environments generate the observations, so ``synthetic_data`` stays null.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import time

import gymnasium
import numpy as np
import pytest
import torch

from milabench import ppo, rl
from milarun.measure.experiment import BadTestArguments
from modelrun import assert_rejected, run_trained

# Each run trains for 6 slices of 0.5 s, however fast this machine is.
CART_ARGS = ["--min-slices", "6"]
MINIGRID_ARGS = [
    "--procs",
    "2",
    "--frames-per-proc",
    "8",
    "--recurrence",
    "4",
    "--batch-size",
    "8",
    "--min-slices",
    "6",
]
ATARI_ARGS = [
    "--num-processes",
    "2",
    "--num-steps",
    "16",
    "--use-gae",
    "--use-linear-lr-decay",
    "--min-slices",
    "6",
]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """The in-process tests on one thread, like the runs (two threads fighting the other
    processes of a 2-core machine make a tiny update 10x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def has_opencv() -> bool:
    try:
        import cv2  # noqa: F401
    except ImportError:
        return False
    return True


# -- returns and advantages ---------------------------------------------------------------
def test_discounted_returns_restart_after_each_episode():
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0])
    dones = torch.tensor([False, True, False, False])
    returns = rl.discounted_returns(rewards, dones, gamma=0.9)
    # The last step ends its (cut) episode: nothing is bootstrapped.
    assert torch.allclose(returns, torch.tensor([1.9, 1.0, 1.9, 1.0]))


def test_reinforce_loss_uses_normalised_returns():
    log_probs = torch.tensor([-0.5, -1.0, -0.25], requires_grad=True)
    rewards = torch.tensor([0.0, 1.0, 2.0])
    dones = torch.tensor([False, False, True])
    loss = rl.reinforce_loss(log_probs, rewards, dones, gamma=1.0)
    returns = torch.tensor([3.0, 3.0, 2.0])  # 0+1+2, 1+2, 2
    weights = (returns - returns.mean()) / returns.std()
    assert torch.allclose(loss, -(log_probs * weights).sum())
    loss.backward()
    assert torch.allclose(log_probs.grad, -weights)  # better returns: likelier actions
    assert torch.allclose(rl.normalise(torch.full((4,), 7.0)), torch.zeros(4))  # finite


def test_gae_matches_a_hand_computed_example():
    # Two environments (columns); the first ends an episode after step 1.
    rewards = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 1.0]])
    values = torch.tensor([[0.5, 0.0], [1.0, 0.0], [1.5, 0.0]])
    dones = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    last = torch.tensor([2.0, 4.0])
    advantages, returns = rl.gae(rewards, values, dones, last, gamma=0.5, lam=0.5)
    # Column 0: delta = [1 + .5*1 - .5, 2 - 1 (episode ends), 3 + .5*2 - 1.5] = [1, 1, 2.5];
    # A_2 = 2.5, A_1 = 1 (not carried over the end), A_0 = 1 + .25 * 1 = 1.25.
    # Column 1: delta = [0, 0, 1 + .5*4] = [0, 0, 3]; A = [3*.25^2, 3*.25, 3].
    expected = torch.tensor([[1.25, 0.1875], [1.0, 0.75], [2.5, 3.0]])
    assert torch.allclose(advantages, expected)
    assert torch.allclose(returns, expected + values)
    # lambda = 1: the discounted returns, bootstrapped from the last value.
    advantages, returns = rl.gae(rewards, values, dones, last, gamma=0.5, lam=1.0)
    assert torch.allclose(returns, torch.tensor([[2.0, 0.75], [2.0, 1.5], [4.0, 3.0]]))


def test_ppo_losses_clip_the_ratio_and_the_value():
    actions = torch.tensor([0, 1])
    old_log_probs = torch.log(torch.tensor([0.5, 0.5]))
    advantages = torch.tensor([1.0, -1.0])
    same = ppo.ppo_losses(
        torch.zeros(2, 2),
        torch.tensor([1.0, 2.0]),
        actions,
        old_log_probs,
        torch.tensor([1.0, 2.0]),
        advantages,
        torch.tensor([2.0, 2.0]),
        0.2,
    )
    assert torch.isclose(same["policy_loss"], torch.tensor(0.0))  # ratio 1: -mean(A)
    assert torch.isclose(same["value_loss"], torch.tensor(0.25))  # 0.5 * mean([1, 0])
    assert torch.isclose(same["entropy"], torch.log(torch.tensor(2.0)))
    # Action 0 now has probability 0.9 (ratio 1.8, A > 0): the gain stops at 1 + clip.
    logits = torch.log(torch.tensor([[0.9, 0.1], [0.5, 0.5]]))
    moved = ppo.ppo_losses(
        logits,
        torch.tensor([3.0, 2.0]),
        actions,
        old_log_probs,
        torch.tensor([1.0, 2.0]),
        advantages,
        torch.tensor([3.0, 2.0]),
        0.2,
    )
    assert torch.isclose(moved["policy_loss"], torch.tensor(-(1.2 - 1.0) / 2))
    # The value moved by 2 towards its target is clipped to 0.2: 0.5 * mean([1.8^2, 0]).
    assert torch.isclose(moved["value_loss"], torch.tensor(0.5 * 1.8**2 / 2))


def test_linear_decay():
    optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=1.0)
    ppo.linear_decay(optimizer, 2.5e-4, 0, 4)
    assert optimizer.param_groups[0]["lr"] == 2.5e-4
    ppo.linear_decay(optimizer, 2.5e-4, 3, 4)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-4 / 4)


# -- arguments ------------------------------------------------------------------------------
def ppo_args(*argv: str, **defaults: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    ppo.add_ppo_arguments(parser, **defaults)
    return parser.parse_args(argv)


def test_ppo_arguments_take_both_legacy_spellings():
    a = ppo_args(
        "--procs",
        "4",
        "--frames-per-proc",
        "8",
        "--clip-eps",
        "0.3",
        "--discount",
        "0.9",
        "--epochs",
        "2",
        "--use-gae",
    )
    b = ppo_args(
        "--num-processes",
        "4",
        "--num-steps",
        "8",
        "--clip-param",
        "0.3",
        "--gamma",
        "0.9",
        "--ppo-epoch",
        "2",
        "--use-gae",
    )
    assert vars(a) == vars(b)
    assert a.asynchronous and not ppo_args("--sync").asynchronous  # worker processes by default
    config = ppo.PPOConfig.from_args(a, batch_size=16, recurrence=4)
    assert (config.minibatches, config.clip, config.gamma, config.epochs) == (2, 0.3, 0.9, 2)
    assert config.gae_lambda == 0.95
    config = ppo.PPOConfig.from_args(
        ppo_args("--num-steps", "8", "--num-mini-batch", "8"), batch_size=256
    )
    assert config.minibatches == 8 and config.gae_lambda == 1.0  # no --use-gae: lambda 1
    with pytest.raises(SystemExit):  # both ways of minibatching at once
        ppo_args("--num-mini-batch", "2", "--batch-size", "8")


@pytest.mark.parametrize(
    "argv, defaults, message",
    [
        (["--procs", "2", "--frames-per-proc", "32"], {"batch_size": 256}, "--batch-size 256"),
        (["--procs", "2", "--frames-per-proc", "32", "--batch-size", "30"], {}, "--batch-size 30"),
        (
            ["--num-processes", "2", "--num-steps", "16", "--num-mini-batch", "3"],
            {},
            "3 minibatches",
        ),
        (["--num-steps", "6"], {"minibatches": 4, "recurrence": 4}, "6 steps"),
    ],
)
def test_ppo_minibatches_must_split_the_rollout(argv, defaults, message):
    with pytest.raises(BadTestArguments, match=message):
        ppo.PPOConfig.from_args(ppo_args(*argv), **defaults)


@pytest.mark.parametrize(
    "module, argv, message",
    [
        ("minigrid", ["--procs", "2", "--frames-per-proc", "40"], "--batch-size 1280"),
        ("minigrid", ["--env", "NoSuchEnv-v0"], "--env NoSuchEnv-v0"),
        ("minigrid", ["--recurrence", "0"], "--recurrence"),
        (
            "atari",
            ["--num-processes", "2", "--num-steps", "16", "--num-mini-batch", "5"],
            "5 minibatches",
        ),
        ("atari", ["--env-name", "NoSuchGame-v4"], "--env-name NoSuchGame-v4"),
        ("cart", ["--dropout", "1"], "--dropout 1"),
        ("cart", ["--episode-length", "0"], "--episode-length"),
    ],
)
def test_bad_arguments(module, argv, message):
    assert_rejected(module, argv, message)


# -- cart: the legacy policy and sampling ------------------------------------------------------
def test_cart_policy_is_the_legacy_network():
    """4-128-2 with a softmax out and no dropout module (legacy: a Dropout(0) is extra work
    per step); --dropout > 0 adds one."""
    from milabench.models import cart

    policy = cart.Policy()
    assert not any(isinstance(m, torch.nn.Dropout) for m in policy.modules())
    probs = policy(torch.randn(3, 4))
    assert probs.shape == (3, 2) and torch.allclose(probs.sum(1), torch.ones(3))
    assert bool((probs > 0).all())  # probabilities, not logits
    assert any(isinstance(m, torch.nn.Dropout) for m in cart.Policy(dropout=0.5).modules())


def test_cart_samples_without_validating_the_distribution(monkeypatch):
    """torch.distributions checks every argument and sample by default since torch 1.8; the
    legacy ran torch 1.5, which did not: cart plays with the checks off."""
    from torch.distributions import Distribution, constraints

    from milabench.models import cart

    checked = []
    monkeypatch.setattr(Distribution, "_validate_args", True)  # torch's default
    monkeypatch.setattr(
        Distribution, "_validate_sample", lambda self, value: checked.append("sample")
    )
    for constraint in (constraints.simplex, constraints.real_vector):
        monkeypatch.setattr(
            type(constraint), "check", lambda self, value: checked.append("argument") or True
        )
    env = gymnasium.make("CartPole-v0")
    env.reset(seed=0)
    log_probs, rewards, dones, _ = cart.play(env, cart.Policy(), 30)
    env.close()
    assert log_probs.shape == rewards.shape == dones.shape == (30,)
    assert bool((log_probs <= 0).all())
    assert checked == []


def test_ppo_samples_and_scores_without_validating_the_distribution(monkeypatch):
    """minigrid and atari as the 2020 code ran them (torch 1.5): no argument or sample
    checks, each of which syncs the host with the device."""
    from torch.distributions import Distribution, constraints

    checked = []
    monkeypatch.setattr(Distribution, "_validate_args", True)  # torch's default
    monkeypatch.setattr(
        Distribution, "_validate_sample", lambda self, value: checked.append("sample")
    )
    monkeypatch.setattr(
        type(constraints.real_vector), "check", lambda self, value: checked.append("arg") or True
    )
    logits, value = torch.randn(4, 3), torch.randn(4)
    actions = torch.tensor([0, 1, 2, 1])
    parts = ppo.ppo_losses(
        logits, value, actions, torch.zeros(4), torch.zeros(4), torch.ones(4), torch.ones(4), 0.2
    )
    assert torch.isfinite(parts["entropy"]) and checked == []
    agent = minigrid_agent(seed=0)
    agent.collect()
    assert checked == []


# -- PPO on real environments, in this process ------------------------------------------------
def minigrid_agent(seed: int) -> ppo.PPO:
    """Two environments stepped in this process (quicker to start than worker processes)."""
    from milabench.models import minigrid

    torch.manual_seed(seed)
    envs = rl.vector_env(functools.partial(minigrid.make_env, "BabyAI-UnlockPickup-v0"), 2)
    model = minigrid.FiLMActorCritic(envs.single_action_space.n)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-5)
    config = ppo.PPOConfig(
        minibatches=2,
        epochs=1,
        recurrence=4,
        normalise_advantages=False,
        reward_scale=20.0,
        value_factor=1.0,
    )
    return ppo.PPO(
        envs,
        model,
        optimizer,
        config,
        8,
        torch.device("cpu"),
        seed,
        memory_size=model.memory_size,
        observe=minigrid.Observer(torch.device("cpu")),
    )


def test_recurrent_ppo_is_deterministic_for_a_seed():
    runs = []
    for seed in (3, 3, 4):
        agent = minigrid_agent(seed)
        losses = [agent.iteration() for _ in range(2)]
        runs.append((torch.stack(losses), agent.storage.obs.clone()))
        agent.envs.close()
    (loss_a, obs_a), (loss_b, obs_b), (loss_c, obs_c) = runs
    assert torch.equal(loss_a, loss_b) and torch.equal(obs_a, obs_b)
    assert not torch.equal(obs_a, obs_c)
    # The view's 147 codes, then the 5 word ids of "pick up the <colour> box".
    assert obs_a.shape == (8, 2, 7 * 7 * 3 + 5) and obs_a.dtype == torch.uint8


def test_rollout_masks_reset_the_memory_at_episode_starts():
    agent = minigrid_agent(0)
    agent.collect()
    store = agent.storage
    assert torch.equal(store.masks[0], torch.zeros(2))  # the first step starts episodes
    assert torch.equal(store.masks[1:], 1.0 - store.dones[:-1])
    assert torch.equal(store.memories[0], torch.zeros(2, 256))  # LSTM h and c
    assert store.memories[1].abs().sum() > 0  # then each step gets the previous one's memory
    agent.envs.close()


class SlowEnv(gymnasium.Env):
    """Each step takes 1 s; its observation is the pid of the process that stepped it and
    when the step began and ended (wall clock)."""

    observation_space = gymnasium.spaces.Box(0, 2**40, (3,), np.float64)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([os.getpid(), 0.0, 0.0]), {}

    def step(self, action):
        began = time.time()
        time.sleep(1.0)
        return np.array([os.getpid(), began, time.time()]), 0.0, False, False, {}


def test_async_vector_env_steps_in_parallel_worker_processes():
    envs = rl.vector_env(SlowEnv, 2, asynchronous=True)
    try:
        assert isinstance(envs, gymnasium.vector.AsyncVectorEnv)
        envs.reset(seed=0)
        obs, *_ = envs.step(np.array([0, 1]))
        pids = set(obs[:, 0].astype(int).tolist())
        assert pids == {p.pid for p in envs.processes} and os.getpid() not in pids
        assert len(pids) == 2
        # both steps at once: each began before the other ended (no wall-clock limit)
        assert max(obs[:, 1]) < min(obs[:, 2]), obs
    finally:
        envs.close()


# -- minigrid: babyai's FiLM model --------------------------------------------------------------
def packed(image: torch.Tensor, *missions: list[int]) -> torch.Tensor:
    """Observations as minigrid.Observer makes them: the view's codes, then the word ids."""
    return torch.cat(
        [image.reshape(len(missions), -1), torch.tensor(missions, dtype=torch.uint8)], 1
    )


def test_minigrid_vocabulary_is_built_as_babyai_does():
    from milabench.models import minigrid

    vocabulary = minigrid.Vocabulary()
    assert vocabulary.encode("pick up the red box") == [1, 2, 3, 4, 5]
    assert vocabulary.encode("Pick up the BLUE box, then go") == [1, 2, 3, 6, 5, 7, 8]


def test_minigrid_film_output_changes_with_the_mission_only():
    from milabench.models import minigrid

    torch.manual_seed(0)
    model = minigrid.FiLMActorCritic(7)
    image = torch.randint(0, 6, (1, 7, 7, 3), dtype=torch.uint8).expand(2, -1, -1, -1)
    red, blue = [1, 2, 3, 4, 5], [1, 2, 3, 6, 5]

    def films(*missions: list[int]) -> torch.Tensor:
        return model.features(image, model.instruction(torch.tensor(missions)))

    same, different = films(red, red), films(red, blue)
    assert same.shape == (2, 128) and torch.equal(same[0], same[1])
    assert not torch.allclose(different[0], different[1])  # the same view, another mission
    logits, _, _ = model(packed(image, red, blue), torch.zeros(2, model.memory_size))
    assert not torch.allclose(logits[0], logits[1])


def test_minigrid_memory_carries_the_past_into_the_policy():
    from milabench.models import minigrid

    torch.manual_seed(0)
    model = minigrid.FiLMActorCritic(7)
    assert isinstance(model.memory, torch.nn.LSTMCell) and model.memory_size == 256
    image = torch.randint(0, 6, (1, 7, 7, 3), dtype=torch.uint8).expand(2, -1, -1, -1)
    obs = packed(image, [1, 2, 3, 4, 5], [1, 2, 3, 4, 5])
    memory = torch.zeros(2, 256)
    memory[1] = torch.randn(256)
    memory.requires_grad_(True)
    _, _, after_one = model(obs, memory)
    logits, _, _ = model(obs, after_one)  # two steps, as in a recurrence sequence
    assert not torch.allclose(logits[0], logits[1])  # same inputs, different past
    logits[1].sum().backward()
    assert memory.grad[1].abs().sum() > 0  # the gradient goes back through the steps


def test_minigrid_missions_come_from_worker_processes():
    from milabench.models import minigrid

    envs = rl.vector_env(
        functools.partial(minigrid.make_env, "BabyAI-UnlockPickup-v0"), 2, asynchronous=True
    )
    try:
        assert all(p.pid != os.getpid() and p.is_alive() for p in envs.processes)
        observe = minigrid.Observer(torch.device("cpu"))
        obs = observe(envs.reset(seed=0)[0], None)
        assert obs.shape == (2, 147 + 5)  # "pick up the <colour> box"
        assert obs[:, 147:150].tolist() == [[1, 2, 3]] * 2  # through the shared memory
        obs = observe(envs.step(np.array([0, 1]))[0], np.zeros(2, bool))
        assert obs[:, 147:150].tolist() == [[1, 2, 3]] * 2
    finally:
        envs.close()


# -- atari: the pytorch-a2c-ppo-acktr CNN and the frame stack -----------------------------------
def test_atari_cnn_layers():
    from milabench.models import atari

    model = atari.AtariCNN(6)
    layers = [m for m in model.body if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert [tuple(m.weight.shape) for m in layers] == [
        (32, 4, 8, 8),
        (64, 32, 4, 4),
        (32, 64, 3, 3),
        (512, 32 * 7 * 7),
    ]
    assert [m.stride for m in layers[:3]] == [(4, 4), (2, 2), (1, 1)]
    logits, value, memory = model(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert logits.shape == (3, 6) and value.shape == (3,) and memory is None


def test_atari_frame_stack_shifts_and_restarts_on_the_device():
    from milabench.models import atari

    stack = atari.FrameStack(torch.device("cpu"))
    frames = lambda k: np.full((2, 84, 84), k, np.uint8)  # noqa: E731
    obs = stack(frames(1), None)
    assert obs.shape == (2, 4, 84, 84) and obs[:, :, 0, 0].tolist() == [[0, 0, 0, 1]] * 2
    first = obs
    obs = stack(frames(2), np.array([False, True]))  # environment 1 starts a new episode
    assert obs[:, :, 0, 0].tolist() == [[0, 0, 1, 2], [0, 0, 0, 2]]
    assert first[:, :, 0, 0].tolist() == [[0, 0, 0, 1]] * 2  # what the rollout kept is intact


# -- the models -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "model, args, per_iteration",
    [
        ("cart", CART_ARGS, 500),  # --episode-length steps, as the legacy cart_pole counted
        ("minigrid", MINIGRID_ARGS, 2 * 8),  # the frames of a rollout, as babyai's num_frames
    ],
)
def test_model_trains(tmp_path, model, args, per_iteration):
    ppo = () if model == "cart" else ("policy_loss", "value_loss", "entropy")
    # No dataset at all: synthetic_data stays null.
    result = run_trained(model, None, tmp_path, args, metrics=("loss", *ppo), synthetic=None)
    assert all(math.isfinite(v) for v in result["metrics"].values()), result["metrics"]
    train = result["timings"]["train"]
    assert train["count"] == per_iteration * train["blocks"]  # counted in environment steps
    assert not any(k.startswith("per_example.") for k in result["metrics"])  # natural already


@pytest.mark.slow
@pytest.mark.skipif(
    not has_opencv(), reason="gymnasium's AtariPreprocessing needs opencv-python-headless"
)
def test_atari_counts_its_environments_per_iteration(tmp_path):
    """The legacy unit: --num-processes examples per PPO iteration of num_processes x
    num_steps agent steps; per_example.agent_steps gives the rate in agent steps."""
    result = run_trained(
        "atari",
        None,
        tmp_path,
        ATARI_ARGS,
        metrics=("loss", "policy_loss", "value_loss", "entropy"),
        synthetic=None,
    )
    assert all(math.isfinite(v) for v in result["metrics"].values()), result["metrics"]
    train = result["timings"]["train"]
    assert train["blocks"] > 0 and train["count"] == 2 * train["blocks"]  # --num-processes 2
    assert result["metrics"]["per_example.agent_steps"] == 16.0  # --num-steps 16
