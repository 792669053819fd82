"""Bandits: checkers, rewards and infos, candidate scoring, context replay, ansi rendering, bad kwargs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import tpo_gym  # noqa: F401  (registers the ids)
from tpo_gym.envs.bandits import KArmedBanditEnv, MultiContextBanditEnv

BANDIT_IDS = ["TPO/KArmedBandit-v0", "TPO/MultiContextBandit-v0"]


@pytest.mark.parametrize("env_id", BANDIT_IDS)
def test_registered_bandits_pass_checkers(env_id):
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make(env_id)
    check_env(env.unwrapped)
    sb3_check_env(env.unwrapped)


def test_k_armed_defaults_rewards_and_info():
    env = KArmedBanditEnv()
    assert env.observation_space == gym.spaces.Discrete(1) and env.action_space.n == 100
    obs, info = env.reset(seed=0)
    assert obs == 0 and info["context"] == 0
    obs, reward, terminated, truncated, info = env.step(0)
    assert (obs, reward, terminated, truncated) == (0, 1.0, True, False)
    assert info == {"correct_action": 0, "is_success": True}
    env.reset()
    _, reward, _, _, info = env.step(5)
    assert reward == 0.0 and info["is_success"] is False


def test_multi_context_bandit_per_context_arms():
    env = MultiContextBanditEnv(n_contexts=3, n_arms=4, correct_arm=[2, 0, 3])
    seen = set()
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        assert obs == info["context"] and 0 <= obs < 3
        seen.add(obs)
        correct = [2, 0, 3][obs]
        _, reward, _, _, info = env.step(correct)
        assert reward == 1.0 and info["correct_action"] == correct
    assert seen == {0, 1, 2}


def test_multi_context_defaults():
    env = gym.make("TPO/MultiContextBandit-v0").unwrapped
    assert env.observation_space.n == 100 and env.action_space.n == 10
    env.reset(seed=1)
    np.testing.assert_array_equal(env.score_candidates(np.arange(10)), np.eye(10)[0])


def test_context_replay():
    env = MultiContextBanditEnv(n_contexts=5, n_arms=3, correct_arm=[0, 1, 2, 0, 1])
    obs, info = env.reset(seed=3, options={"context": 4})
    assert obs == 4 and info["context"] == 4
    assert env.step(1)[1] == 1.0
    with pytest.raises(ValueError, match=r"in \[0, 4\]"):
        env.reset(options={"context": 5})
    k_armed = KArmedBanditEnv(n_arms=3)
    assert k_armed.reset(options={"context": 0})[0] == 0
    with pytest.raises(ValueError, match=r"in \[0, 0\]"):
        k_armed.reset(options={"context": 1})


@pytest.mark.parametrize("env", [KArmedBanditEnv(n_arms=6, correct_arm=4),
                                 MultiContextBanditEnv(n_contexts=4, n_arms=6, correct_arm=[1, 5, 0, 4])])
def test_candidate_scores_match_stepping(env):
    candidates = np.array([4, 0, 5, 1, 4, 3])
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        scores = env.score_candidates(candidates)
        assert scores.dtype == np.float32 and scores.shape == (6,)
        for cand, score in zip(candidates, scores, strict=True):
            env.reset(options={"context": obs})
            assert env.step(cand)[1] == score
        assert scores.sum() >= 1  # every correct arm is among the candidates


@pytest.mark.parametrize("cls, kwargs, match", [
    (KArmedBanditEnv, {"n_arms": 1}, r"n_arms must be an integer >= 2, got 1"),
    (KArmedBanditEnv, {"n_arms": 5, "correct_arm": 5}, r"correct_arm must be an integer in \[0, 4\], got 5"),
    (KArmedBanditEnv, {"correct_arm": -1}, r"correct_arm must be an integer in \[0, 99\], got -1"),
    (MultiContextBanditEnv, {"n_contexts": 0}, r"n_contexts must be an integer >= 1, got 0"),
    (MultiContextBanditEnv, {"n_contexts": 2, "correct_arm": [0, 10]}, r"correct_arm must lie in \[0, 9\]"),
    (MultiContextBanditEnv, {"n_contexts": 3, "correct_arm": [0, 1]}, r"one arm or 3 arms"),
])
def test_bad_kwargs_raise(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_bad_kwargs_raise_through_make():
    with pytest.raises(ValueError, match="n_arms must be an integer >= 2"):
        gym.make("TPO/KArmedBandit-v0", n_arms=1)
    with pytest.raises(ValueError, match="n_arms must be an integer >= 2"):
        gym.make_vec("TPO/MultiContextBandit-v0", num_envs=2, vectorization_mode="vector_entry_point",
                     n_arms=0)


@pytest.mark.parametrize("env_id", BANDIT_IDS)
def test_ansi_render_mode_passes_checker(env_id):
    env = gym.make(env_id, render_mode="ansi")
    assert env.metadata["render_modes"] == ["ansi"] and env.render_mode == "ansi"
    check_env(env.unwrapped)


def test_ansi_render_of_known_pulls():
    env = MultiContextBanditEnv(n_contexts=3, n_arms=4, correct_arm=[2, 0, 3], render_mode="ansi")
    assert env.render() is None  # before the first reset
    env.reset(options={"context": 2})
    assert env.render() == "context 2 | action - | correct arm 3 | reward -"
    env.step(1)
    assert env.render() == "context 2 | action 1 | correct arm 3 | reward 0 (wrong)"
    env.reset(options={"context": 0})
    env.step(2)
    assert env.render() == "context 0 | action 2 | correct arm 2 | reward 1 (right)"
    bandit = KArmedBanditEnv(n_arms=5, correct_arm=4, render_mode="ansi")
    bandit.reset(seed=0)
    bandit.step(4)
    assert bandit.render() == "context 0 | action 4 | correct arm 4 | reward 1 (right)"


def test_invalid_render_mode_is_one_line():
    with pytest.raises(ValueError, match=r"^unknown render_mode 'human'; allowed values: ansi or None$"):
        KArmedBanditEnv(render_mode="human")
    with pytest.raises(ValueError, match="render_mode 'rgb_array'"):
        MultiContextBanditEnv(render_mode="rgb_array")
