"""Token tasks: checkers, hand-worked rewards, candidate scoring, ansi rendering, bad kwargs, SB3 PPO."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import tpo_gym  # noqa: F401  (registers the ids)
from tpo_gym.envs.tokens import LOGICS, REWARDS, TokenTaskEnv

TOKEN_IDS = ["TPO/TokenCopy-v0", "TPO/TokenFlip-v0", "TPO/TokenReversal-v0", "TPO/TokenReverseFlip-v0"]

# Hand-worked targets of the prompt x = [2, 0, 1, 1] with V = 3 (paper Sec. 3.5's four target logics).
PROMPT = np.array([2, 0, 1, 1])
TARGETS = {"copy": [2, 0, 1, 1], "flip": [0, 2, 1, 1], "reverse_copy": [1, 1, 0, 2],
           "reverse_flip": [1, 1, 2, 0]}


def run_episode(env: TokenTaskEnv, prompt, actions):
    obs, info = env.reset(options={"context": prompt})
    rewards = []
    for action in actions:
        obs, reward, terminated, truncated, step_info = env.step(action)
        rewards.append(reward)
    assert terminated is True and truncated is False
    return info, rewards, step_info, obs


@pytest.mark.parametrize("env_id", TOKEN_IDS)
def test_registered_token_envs_pass_checkers(env_id):
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make(env_id)
    check_env(env.unwrapped)
    sb3_check_env(env.unwrapped)
    assert env.spec.max_episode_steps is None


@pytest.mark.parametrize("kwargs", [{"reward": "sequential"}, {"reward": "terminal"},
                                    {"sequence_length": 1}, {"vocab_size": 5, "sequence_length": 3}])
def test_token_env_kwargs_pass_checker(kwargs):
    check_env(gym.make("TPO/TokenReversal-v0", **kwargs).unwrapped)


def test_non_default_length_runs_to_its_end_under_make():
    env = gym.make("TPO/TokenCopy-v0", sequence_length=13)
    env.reset(seed=0)
    for _ in range(12):
        assert env.step(0)[2] is False
    assert env.step(0)[2] is True


def test_observation_layout_and_reset_info():
    env = TokenTaskEnv("reverse_flip", sequence_length=4, vocab_size=3)
    obs, info = env.reset(options={"context": PROMPT})
    assert obs.dtype == np.int64 and obs in env.observation_space
    np.testing.assert_array_equal(obs, [2, 0, 1, 1, 3, 3, 3, 3])
    np.testing.assert_array_equal(info["prompt"], PROMPT)
    np.testing.assert_array_equal(info["target"], TARGETS["reverse_flip"])
    obs, *_ = env.step(1)
    np.testing.assert_array_equal(obs, [2, 0, 1, 1, 1, 3, 3, 3])


@pytest.mark.parametrize("logic", LOGICS)
def test_targets_per_logic(logic):
    env = TokenTaskEnv(logic, sequence_length=4, vocab_size=3)
    _, info = env.reset(options={"context": PROMPT})
    np.testing.assert_array_equal(info["target"], TARGETS[logic])


# (per-step rewards, token_rewards) for target actions with a wrong token at position 1.
ONE_MISTAKE = {"bag_of_tokens": ([1, 0, 1, 1], [1, 0, 1, 1]), "sequential": ([1, 0, 0, 0], [1, 0, 0, 0]),
               "terminal": ([0, 0, 0, 0], [0, 0, 0, 0])}
EXACT = {"bag_of_tokens": [1, 1, 1, 1], "sequential": [1, 1, 1, 1], "terminal": [0, 0, 0, 4]}


@pytest.mark.parametrize("logic", LOGICS)
@pytest.mark.parametrize("reward", REWARDS)
def test_rewards_on_hand_worked_sequences(logic, reward):
    env = TokenTaskEnv(logic, reward, sequence_length=4, vocab_size=3)
    target = list(TARGETS[logic])
    _, rewards, info, obs = run_episode(env, PROMPT, target)
    assert rewards == EXACT[reward]
    np.testing.assert_array_equal(obs[4:], target)
    np.testing.assert_array_equal(info["token_rewards"], [1, 1, 1, 1])
    assert info["token_error"] == 0.0 and info["exact_match"] is True and info["is_success"] is True

    wrong = target.copy()
    wrong[1] = (wrong[1] + 1) % 3
    _, rewards, info, _ = run_episode(env, PROMPT, wrong)
    step_rewards, token_rewards = ONE_MISTAKE[reward]
    assert rewards == step_rewards
    assert info["token_rewards"].dtype == np.float32
    np.testing.assert_array_equal(info["token_rewards"], token_rewards)
    assert info["token_error"] == pytest.approx(1 - np.mean(token_rewards))
    assert info["exact_match"] is False and info["is_success"] is False
    assert sum(rewards) / 4 == pytest.approx(np.mean(token_rewards))  # return / H = sequence score


def test_sequential_gives_nothing_after_first_mistake():
    env = TokenTaskEnv("copy", "sequential", sequence_length=5, vocab_size=2)
    prompt = np.array([0, 1, 1, 0, 1])
    actions = prompt.copy()
    actions[2] = 0  # wrong at t = 2, right afterwards
    _, rewards, info, _ = run_episode(env, prompt, actions)
    assert rewards == [1, 1, 0, 0, 0]
    assert info["token_error"] == pytest.approx(0.6)


@pytest.mark.parametrize("reward", ["bag_of_tokens", "sequential"])
@pytest.mark.parametrize("logic", ["copy", "reverse_flip"])
def test_candidate_scores_match_stepping(logic, reward):
    H, V = 5, 3
    env, replay = TokenTaskEnv(logic, reward, H, V), TokenTaskEnv(logic, reward, H, V)
    _, info = env.reset(seed=7)
    prompt, target = info["prompt"], info["target"]
    behaviour = target.copy()
    behaviour[1] = (behaviour[1] + 1) % V  # a mistake at t = 1
    candidates = np.array([2, 0, 1, 1, 0, 2])  # all tokens, with duplicates
    for t in range(H):
        scores = env.score_candidates(candidates)
        assert scores.dtype == np.float32 and scores.shape == candidates.shape
        for cand, score in zip(candidates, scores, strict=True):
            replay.reset(options={"context": prompt})
            for a in behaviour[:t]:
                replay.step(a)
            assert replay.step(cand)[1] == score
        if reward == "sequential" and t >= 2:
            assert not scores.any()
        env.step(behaviour[t])


def test_scoring_does_not_change_state():
    env = TokenTaskEnv("copy", sequence_length=3, vocab_size=2)
    env.reset(options={"context": [1, 0, 1]})
    env.score_candidates([0, 1, 1])
    assert env.step(1)[1] == 1.0


def test_terminal_reward_rejects_candidate_scoring():
    env = TokenTaskEnv("copy", "terminal", sequence_length=3)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="sequence-level groups"):
        env.score_candidates([0, 1])


def test_wrong_usage_errors():
    env = TokenTaskEnv(sequence_length=2)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        env.step(2)
    with pytest.raises(ValueError, match="sequence_length=2"):
        env.reset(options={"context": [0, 1, 1]})
    with pytest.raises(ValueError, match="allowed options: context"):
        env.reset(options={"prompt": [0, 1]})
    env.step(0)
    env.step(0)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)


@pytest.mark.parametrize("env_id", TOKEN_IDS)
def test_ansi_render_mode_passes_checker(env_id):
    env = gym.make(env_id, render_mode="ansi")
    assert env.metadata["render_modes"] == ["ansi"] and env.render_mode == "ansi"
    check_env(env.unwrapped)


def test_ansi_render_of_a_known_episode():
    # x = [2, 0, 1, 1], reverse copy: y* = [1, 1, 0, 2]; the agent writes 1, 0, 0, 1 (2nd and 4th wrong).
    env = TokenTaskEnv("reverse_copy", sequence_length=4, vocab_size=3, render_mode="ansi")
    env.reset(options={"context": PROMPT})
    assert env.render() == (
        "reverse_copy, bag_of_tokens reward: step 0/4, return 0\n"
        "prompt  2  0  1  1\n"
        "target  1  1  0  2\n"
        "agent   .  .  .  .\n"
        "0 wrong tokens"
    )
    env.step(1)
    env.step(0)
    assert env.render().splitlines()[3] == "agent   1 [0] .  ."
    env.step(0)
    env.step(1)
    text = env.render()
    assert text == (
        "reverse_copy, bag_of_tokens reward: step 4/4, return 2\n"
        "prompt  2  0  1  1\n"
        "target  1  1  0  2\n"
        "agent   1 [0] 0 [1]\n"
        "2 wrong tokens (in [brackets])"
    )
    assert text.isascii()


@pytest.mark.parametrize("reward, expected", [("sequential", 1), ("terminal", 0)])
def test_ansi_render_return_follows_the_reward(reward, expected):
    env = TokenTaskEnv("reverse_copy", reward, sequence_length=4, vocab_size=3, render_mode="ansi")
    env.reset(options={"context": PROMPT})
    for action in (1, 0, 0, 1):
        env.step(action)
    assert env.render().splitlines()[0] == f"reverse_copy, {reward} reward: step 4/4, return {expected}"


def test_ansi_render_pads_wide_tokens_and_is_off_by_default():
    env = TokenTaskEnv("copy", sequence_length=2, vocab_size=12, render_mode="ansi")
    assert env.render() is None  # before the first reset
    env.reset(options={"context": [11, 3]})
    env.step(11)
    assert env.render().splitlines()[1:4] == ["prompt  11   3", "target  11   3", "agent   11   ."]
    plain = TokenTaskEnv()
    plain.reset(seed=0)
    assert plain.render_mode is None and plain.render() is None


def test_invalid_render_mode_is_one_line():
    with pytest.raises(ValueError, match=r"^unknown render_mode 'human'; allowed values: ansi or None$"):
        TokenTaskEnv(render_mode="human")
    with pytest.warns(UserWarning, match="render_modes"), pytest.raises(ValueError, match="'rgb_array'"):
        gym.make("TPO/TokenReversal-v0", render_mode="rgb_array")


@pytest.mark.filterwarnings("ignore:.*render_mode='rgb_array'")
def test_sb3_make_vec_env_falls_back_from_its_default_rgb_array():
    # make_vec_env asks for render_mode="rgb_array" and retries without it on a TypeError.
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env("TPO/TokenReversal-v0", n_envs=2, seed=0, env_kwargs={"sequence_length": 3})
    assert venv.reset().shape == (2, 6) and venv.envs[0].unwrapped.render_mode is None
    venv.close()


@pytest.mark.parametrize("kwargs, match", [
    ({"vocab_size": 1}, r"vocab_size must be an integer >= 2, got 1"),
    ({"sequence_length": 0}, r"sequence_length must be an integer >= 1, got 0"),
    ({"reward": "dense"}, r"'dense'.*bag_of_tokens, sequential, terminal"),
    ({"logic": "rot13"}, r"'rot13'.*copy, flip, reverse_copy, reverse_flip"),
])
def test_bad_kwargs_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make("TPO/TokenCopy-v0", **kwargs)
    with pytest.raises(ValueError, match=match):
        gym.make_vec("TPO/TokenCopy-v0", num_envs=2, vectorization_mode="vector_entry_point", **kwargs)


@pytest.mark.slow
def test_sb3_ppo_trains_on_gym_make():
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    env = gym.make("TPO/TokenReversal-v0")
    model = PPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(1_000)
    assert model.num_timesteps >= 1_000
