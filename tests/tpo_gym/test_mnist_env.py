"""Tests of the MNIST contextual bandit env (``TPO/MNISTBandit-v0``) and its batched version."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import tpo_gym  # noqa: F401  (registers the ids)
from tpo_gym.envs.mnist import MNISTBanditEnv, MNISTBanditVectorEnv

N_SYNTHETIC = 50


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny synthetic MNIST (50 train and 50 test images) in IDX gzip files."""
    folder = tmp_path_factory.mktemp("mnist")
    rng = np.random.default_rng(0)
    for prefix in ("train", "t10k"):
        images = rng.integers(0, 256, (N_SYNTHETIC, 28, 28), dtype=np.uint8)
        labels = np.arange(N_SYNTHETIC, dtype=np.uint8) % 10
        for kind, arr in (("images-idx3", images), ("labels-idx1", labels)):
            header = struct.pack(">I", 0x0800 | arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
            (folder / f"{prefix}-{kind}-ubyte.gz").write_bytes(gzip.compress(header + arr.tobytes()))
    return folder


@pytest.fixture(scope="module")
def real_data() -> None:
    try:
        MNISTBanditEnv()
    except FileNotFoundError:
        pytest.skip("no MNIST data (python -m tpo_gym.data, or set TPO_GYM_MNIST_DIR)")


def test_step_reward_and_info(data_dir: Path) -> None:
    env = MNISTBanditEnv(split="test", data_dir=data_dir)
    images, labels = MNISTBanditVectorEnv(1, split="test", data_dir=data_dir).dataset()
    obs, info = env.reset(seed=3, options={"context": 7})
    assert info == {"context": 7} and obs.dtype == np.float32 and obs in env.observation_space
    np.testing.assert_array_equal(obs, images[7])
    for action, reward in ((labels[7], 1.0), ((labels[7] + 1) % 10, 0.0)):
        env.reset(options={"context": 7})
        _, r, terminated, truncated, step_info = env.step(action)
        assert (r, terminated, truncated) == (reward, True, False)
        assert type(terminated) is bool and type(truncated) is bool
        assert step_info == {"label": 7, "is_success": reward == 1.0}
    with pytest.raises(RuntimeError):
        env.step(0)  # one step per episode


def test_score_candidates_keeps_state(data_dir: Path) -> None:
    env = MNISTBanditEnv(data_dir=data_dir)
    obs, info = env.reset(seed=0)
    label = info["context"] % 10
    scores = env.score_candidates(np.arange(10))
    assert scores.dtype == np.float32
    np.testing.assert_array_equal(scores, np.arange(10) == label)
    np.testing.assert_array_equal(env.score_candidates([label, label]), [1.0, 1.0])
    assert env.step(label)[1] == 1.0  # scoring did not step


def test_batched_equals_single(data_dir: Path) -> None:
    single = MNISTBanditEnv(data_dir=data_dir)
    batched = MNISTBanditVectorEnv(1, data_dir=data_dir)
    obs, info = single.reset(seed=11)
    vobs, vinfo = batched.reset(seed=11)
    rng = np.random.default_rng(0)
    for _ in range(20):
        np.testing.assert_array_equal(vobs[0], obs)
        assert vinfo["context"][0] == info["context"] == batched.contexts[0]
        action = int(rng.integers(10))
        _, r, term, _, step_info = single.step(action)
        vobs, vr, vterm, _, vinfo = batched.step(np.array([action]))
        assert vr[0] == r and vterm[0] == term
        assert vinfo["final_info"]["label"][0] == step_info["label"]
        obs, info = single.reset()


def test_vector_groups_and_properties(data_dir: Path) -> None:
    env = MNISTBanditVectorEnv(6, data_dir=data_dir)
    obs, info = env.reset(seed=1, options={"group_size": 3})
    assert obs.shape == (6, 784) and env.observation_space.contains(obs)
    assert (env.contexts[:3] == env.contexts[0]).all() and (env.contexts[3:] == env.contexts[3]).all()
    np.testing.assert_array_equal(env.labels, env.contexts % 10)
    np.testing.assert_array_equal(env.images, obs)
    env.reset(options={"contexts": np.array([4, 9]), "group_size": 3})
    np.testing.assert_array_equal(env.contexts, [4, 4, 4, 9, 9, 9])
    candidates = np.tile(np.arange(10), (6, 1))
    np.testing.assert_array_equal(env.score_candidates(candidates), candidates == env.labels[:, None])
    _, rewards, terminated, _, infos = env.step(env.labels)
    np.testing.assert_array_equal(rewards, np.ones(6, dtype=np.float32))
    assert terminated.all() and infos["final_info"]["is_success"].all()
    assert (env.contexts[:3] == env.contexts[0]).all()  # autoreset keeps the group size
    images, labels = env.dataset()
    assert images.shape == (N_SYNTHETIC, 784) and labels.dtype == np.int64
    with pytest.raises(ValueError):
        env.reset(options={"contexts": np.array([N_SYNTHETIC, 0])})


def test_render(data_dir: Path) -> None:
    env = MNISTBanditEnv(data_dir=data_dir, render_mode="rgb_array")
    assert env.render() is None
    obs, _ = env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (28, 28, 3) and frame.dtype == np.uint8
    np.testing.assert_array_equal(frame[..., 0].reshape(-1), np.rint(obs * 255))
    vec = MNISTBanditVectorEnv(2, data_dir=data_dir, render_mode="rgb_array")
    vec.reset(seed=0)
    assert len(vec.render()) == 2


def test_render_ansi(data_dir: Path) -> None:
    env = MNISTBanditEnv(data_dir=data_dir, render_mode="ansi")
    assert env.metadata["render_modes"] == ["rgb_array", "ansi"]
    obs, info = env.reset(options={"context": 13})
    lines = env.render().splitlines()
    assert len(lines) == 15 and all(len(line) <= 28 for line in lines[:14])
    assert lines[-1] == "image 13 | label 3 | action - | reward -"
    env.step(3)
    text = env.render()
    assert text.isascii() and text.splitlines()[-1] == "image 13 | label 3 | action 3 | reward 1 (right)"
    env.reset(options={"context": 13})
    env.step(4)
    assert env.render().endswith("action 4 | reward 0 (wrong)")


def test_invalid_arguments(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="train, test"):
        MNISTBanditEnv(split="valid", data_dir=data_dir)
    with pytest.raises(ValueError, match="train, test"):
        MNISTBanditVectorEnv(2, split="validation", data_dir=data_dir)
    with pytest.raises(ValueError, match="render_mode 'human'; allowed values: rgb_array, ansi or None"):
        MNISTBanditEnv(data_dir=data_dir, render_mode="human")
    with pytest.raises(ValueError, match="render_mode 'ansi'; allowed values: rgb_array or None"):
        MNISTBanditVectorEnv(2, data_dir=data_dir, render_mode="ansi")
    with pytest.raises(ValueError, match="divisible"):
        MNISTBanditVectorEnv(4, data_dir=data_dir, group_size=3)


def test_check_env_real_data(real_data: None) -> None:
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make("TPO/MNISTBandit-v0")
    check_env(env.unwrapped)
    sb3_check_env(MNISTBanditEnv(split="test"))
    vec = gym.make_vec("TPO/MNISTBandit-v0", num_envs=4, split="test")
    assert isinstance(vec, MNISTBanditVectorEnv) and vec.dataset()[0].shape == (10_000, 784)


@pytest.mark.slow
def test_sb3_ppo_trains(real_data: None) -> None:
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    model = PPO("MlpPolicy", "TPO/MNISTBandit-v0", n_steps=128, device="cpu", seed=0)
    model.learn(total_timesteps=1_000)
    assert model.num_timesteps >= 1_000
