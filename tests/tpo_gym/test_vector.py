"""Batched core: make_vec, single == vector, groups, contexts, SAME_STEP autoreset, SB3 adapter."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

import tpo_gym  # noqa: F401  (registers the ids)
from tpo_gym.envs.tokens import TokenTaskEnv
from tpo_gym.sb3 import make_sb3_vec_env
from tpo_gym.vector import uniform_ints

CASES = [("TPO/KArmedBandit-v0", {"n_arms": 4, "correct_arm": 2}),
         ("TPO/MultiContextBandit-v0", {"n_contexts": 5, "n_arms": 3}),
         ("TPO/TokenCopy-v0", {"sequence_length": 3, "vocab_size": 3}),
         ("TPO/TokenFlip-v0", {"reward": "sequential", "sequence_length": 4}),
         ("TPO/TokenReversal-v0", {"reward": "terminal", "sequence_length": 2}),
         ("TPO/TokenReverseFlip-v0", {})]


def make_vec(env_id, num_envs, **kwargs):
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)


def assert_same(single, batched):
    np.testing.assert_array_equal(np.asarray(single), np.asarray(batched))


@pytest.mark.parametrize("env_id, kwargs", CASES)
def test_make_vec_spaces_and_metadata(env_id, kwargs):
    env = make_vec(env_id, 6, **kwargs)
    single = gym.make(env_id, **kwargs)
    assert env.num_envs == 6 and env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert env.single_observation_space == single.observation_space
    assert env.single_action_space == single.action_space
    assert env.observation_space == batch_space(single.observation_space, 6)
    assert env.action_space == batch_space(single.action_space, 6)
    obs, info = env.reset(seed=0)
    assert obs in env.observation_space and info["context"].shape[0] == 6 and info["_context"].all()
    assert make_vec(env_id, 2, **kwargs).unwrapped.spec.id == env_id


@pytest.mark.parametrize("env_id, kwargs", CASES)
def test_single_env_equals_vector_env_with_one_sub_env(env_id, kwargs):
    single, vector = gym.make(env_id, **kwargs), make_vec(env_id, 1, **kwargs)
    actions = np.random.default_rng(0).integers(0, single.action_space.n, size=40)
    obs, info = single.reset(seed=11)
    vobs, vinfo = vector.reset(seed=11)
    for action in actions:
        assert_same(obs, vobs[0])
        for key, value in info.items():
            assert_same(value, vinfo[key][0])
        obs, reward, terminated, truncated, info = single.step(action)
        vobs, vreward, vterm, vtrunc, vinfo = vector.step(np.array([action]))
        assert (reward, terminated, truncated) == (vreward[0], vterm[0], vtrunc[0])
        if terminated:
            assert_same(obs, vinfo["final_obs"][0])
            assert set(info) == {k for k in vinfo["final_info"] if not k.startswith("_")}
            for key, value in info.items():
                assert_same(value, vinfo["final_info"][key][0])
            obs, info = single.reset()


def test_group_reset_shares_contexts_and_autoreset_keeps_groups():
    env = make_vec("TPO/TokenCopy-v0", 6, sequence_length=8, vocab_size=5)
    _, info = env.reset(seed=0, options={"group_size": 3})
    for _ in range(2):  # the reset episode, then the autoreset one
        prompts = env.unwrapped.prompts
        assert (prompts[:3] == prompts[0]).all() and (prompts[3:] == prompts[3]).all()
        assert not (prompts[0] == prompts[3]).all()
        for _ in range(8):
            _, _, terminated, _, info = env.step(np.zeros(6, dtype=np.int64))
        assert terminated.all()
        np.testing.assert_array_equal(info["prompt"], env.unwrapped.prompts)
    env.reset()  # no option: back to independent contexts
    assert len({tuple(p) for p in env.unwrapped.prompts}) > 2


def test_group_size_must_divide_num_envs():
    env = make_vec("TPO/TokenCopy-v0", 6)
    with pytest.raises(ValueError, match="num_envs=6 must be divisible by group_size=4"):
        env.reset(options={"group_size": 4})
    with pytest.raises(ValueError, match="divisible"):
        make_vec("TPO/KArmedBandit-v0", 5, group_size=2)
    with pytest.raises(ValueError, match="allowed options: group_size, contexts"):
        env.reset(options={"context": [0] * 10})
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_vec("TPO/TokenCopy-v0", 2, max_episode_steps=3)


def test_group_size_constructor_default():
    env = make_vec("TPO/MultiContextBandit-v0", 8, group_size=4)
    env.reset(seed=0)
    contexts = env.unwrapped.contexts
    assert (contexts[:4] == contexts[0]).all() and (contexts[4:] == contexts[4]).all()


def test_explicit_contexts():
    prompts = np.array([[0, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0]])
    env = make_vec("TPO/TokenReversal-v0", 4, sequence_length=3)
    _, info = env.reset(options={"contexts": prompts})
    np.testing.assert_array_equal(env.unwrapped.prompts, prompts)
    np.testing.assert_array_equal(env.unwrapped.targets, prompts[:, ::-1])
    np.testing.assert_array_equal(info["target"], prompts[:, ::-1])
    env.reset(options={"contexts": prompts[:2], "group_size": 2})
    np.testing.assert_array_equal(env.unwrapped.prompts, prompts[[0, 0, 1, 1]])
    with pytest.raises(ValueError, match="expected 4 contexts"):
        env.reset(options={"contexts": prompts[:3]})
    bandit = make_vec("TPO/MultiContextBandit-v0", 5, n_contexts=5, correct_arm=[0, 1, 2, 0, 1]).unwrapped
    bandit.reset(options={"contexts": np.arange(5)})
    np.testing.assert_array_equal(bandit.contexts, np.arange(5))
    np.testing.assert_array_equal(bandit.correct_arms, [0, 1, 2, 0, 1])
    np.testing.assert_array_equal(bandit.score_candidates(np.tile(np.arange(3), (5, 1))),
                                  np.eye(3)[[0, 1, 2, 0, 1]])


def test_same_step_autoreset():
    env = make_vec("TPO/TokenCopy-v0", 3, sequence_length=2, vocab_size=2).unwrapped
    obs, _ = env.reset(seed=5)
    first_prompts, targets = env.prompts.copy(), env.targets.copy()
    assert env.step_index == 0 and (obs[:, 2:] == 2).all()
    obs, rewards, terminated, truncated, infos = env.step(targets[:, 0])
    assert env.step_index == 1 and infos == {} and not terminated.any()
    obs, rewards, terminated, truncated, infos = env.step(np.array([targets[0, 1], 1 - targets[1, 1], 0]))
    assert terminated.all() and not truncated.any() and env.step_index == 0
    assert rewards.dtype == np.float32
    assert (obs[:, 2:] == 2).all() and (obs[:, :2] == env.prompts).all()  # the new episodes
    assert infos["_final_obs"].all() and infos["_final_info"].all()
    np.testing.assert_array_equal(infos["final_obs"][:, :2], first_prompts)
    final = infos["final_info"]
    np.testing.assert_array_equal(final["token_rewards"][:2], [[1, 1], [1, 0]])
    np.testing.assert_array_equal(final["exact_match"][:2], [True, False])
    assert final["_token_rewards"].all() and final["token_error"][1] == 0.5
    np.testing.assert_array_equal(infos["prompt"], env.prompts)


def test_vector_scores_match_single_env_scores():
    env = make_vec("TPO/TokenFlip-v0", 4, reward="sequential", sequence_length=3, vocab_size=3).unwrapped
    env.reset(seed=2)
    singles = [TokenTaskEnv("flip", "sequential", 3, 3) for _ in range(4)]
    for single, prompt in zip(singles, env.prompts, strict=True):
        single.reset(options={"context": prompt})
    rng = np.random.default_rng(0)
    for _ in range(3):
        candidates = rng.integers(0, 3, size=(4, 5))
        scores = env.score_candidates(candidates)
        assert scores.dtype == np.float32 and scores.shape == (4, 5)
        for single, row, cands in zip(singles, scores, candidates, strict=True):
            np.testing.assert_array_equal(single.score_candidates(cands), row)
        actions = candidates[:, 0]
        env.step(actions)
        for single, action in zip(singles, actions, strict=True):
            single.step(action)
    with pytest.raises(ValueError, match=r"shape \[n=4, K>=1\]"):
        env.score_candidates(np.zeros(4, dtype=np.int64))


def test_read_only_properties():
    env = make_vec("TPO/TokenCopy-v0", 2).unwrapped
    env.reset(seed=0)
    with pytest.raises(ValueError):
        env.prompts[0, 0] = 1
    assert not env.targets.flags.writeable and not env.contexts.flags.writeable
    bandit = make_vec("TPO/KArmedBandit-v0", 3, correct_arm=7).unwrapped
    bandit.reset(seed=0)
    assert bandit.correct_arm == 7 and bandit.contexts.tolist() == [0, 0, 0]


def test_sb3_adapter_matches_vector_env():
    venv = make_sb3_vec_env("TPO/TokenReversal-v0", 4, seed=3, sequence_length=2)
    reference = make_vec("TPO/TokenReversal-v0", 4, sequence_length=2)
    obs = venv.reset()
    ref_obs, ref_info = reference.reset(seed=3)
    np.testing.assert_array_equal(obs, ref_obs)
    assert venv.observation_space == reference.single_observation_space
    np.testing.assert_array_equal(venv.reset_infos[2]["prompt"], ref_info["prompt"][2])
    np.testing.assert_array_equal(venv.env_method("score_candidates", np.zeros((4, 2), dtype=np.int64)),
                                  reference.score_candidates(np.zeros((4, 2), dtype=np.int64)))
    for _ in range(2):
        actions = np.array([0, 1, 1, 0])
        obs, rewards, dones, infos = venv.step(actions)
        ref_obs, ref_rewards, *_ = reference.step(actions)
        np.testing.assert_array_equal(obs, ref_obs)
        np.testing.assert_array_equal(rewards, ref_rewards)
    assert dones.all() and len(infos) == 4
    assert infos[0]["TimeLimit.truncated"] is False
    assert infos[0]["terminal_observation"].shape == (4,)
    assert set(infos[0]) >= {"token_rewards", "token_error", "exact_match", "is_success"}
    assert "prompt" in venv.reset_infos[0]
    assert venv.get_attr("num_envs", [0, 1]) == [4, 4]
    assert venv.env_is_wrapped(gym.Wrapper) == [False] * 4


def test_sb3_adapter_options_and_seed():
    venv = make_sb3_vec_env("TPO/TokenCopy-v0", 4, vocab_size=5)
    venv.seed(0)
    venv.set_options({"group_size": 2})
    obs = venv.reset()
    assert (obs[0] == obs[1]).all() and (obs[2] == obs[3]).all()
    venv.seed(0)
    assert (venv.reset() == make_vec("TPO/TokenCopy-v0", 4, vocab_size=5).reset(seed=0)[0]).all()
    venv.set_options([{"group_size": 2}, {}, {}, {}])
    with pytest.raises(ValueError, match="one options dict"):
        venv.reset()
    venv.close()


def test_sb3_ppo_trains_through_adapter_and_vec_monitor():
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    torch.set_num_threads(1)
    venv = VecMonitor(make_sb3_vec_env("TPO/TokenReversal-v0", 4, seed=0))
    venv.reset()
    assert venv.score_candidates(np.zeros((4, 3), dtype=np.int64)).shape == (4, 3)
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(1_000)
    assert model.num_timesteps >= 1_000 and len(model.ep_info_buffer) > 0


def test_import_does_not_load_torch_or_sb3():
    code = ("import sys, tpo_gym, tpo_gym.vector, tpo_gym.envs.tokens, tpo_gym.envs.bandits; "
            "assert 'torch' not in sys.modules and 'stable_baselines3' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("high, size", [(60000, 100), (2, (5, 10)), (1, 3), (2**40, 7)])
def test_uniform_ints_draw_what_integers_draws_and_leave_the_same_stream(high, size):
    ours, numpy_s = np.random.default_rng(3), np.random.default_rng(3)
    for _ in range(5):
        got, want = uniform_ints(ours, high, size), numpy_s.integers(0, high, size=size, dtype=np.int64)
        assert got.dtype == np.int64 and np.array_equal(got, want)
    assert ours.bit_generator.state == numpy_s.bit_generator.state
