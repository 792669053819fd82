"""Tests of the Stable-Baselines3 / sb3-contrib algorithms in the zoo (``tpo_agents.zoo.sb3_algos``):
training, saving, reloading and evaluating on CartPole-v1 and a TPO/ env, the RL Zoo's YAML
conventions (schedules, ``normalize``, ARS's worker processes), ``default`` env kwargs that stay with
their envs, and the one-line errors for an algorithm on an env it cannot train on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecNormalize

import tpo_gym  # noqa: F401  (registers the TPO/ envs)
from tpo_agents.zoo import evaluate as evaluate_module
from tpo_agents.zoo import registry, sb3_algos
from tpo_agents.zoo.evaluate import evaluate
from tpo_agents.zoo.evaluate import main as evaluate_main
from tpo_agents.zoo.hyperparams import ConfigError, algo_kwargs
from tpo_agents.zoo.train import configure, train

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "zoo_configs"
NEW_ALGOS = ("a2c", "dqn", "qrdqn", "trpo", "ars", "ppo_lstm")
_TINY_DQN = ["learning_starts:16", "batch_size:8", "buffer_size:500", "train_freq:4", "gradient_steps:1",
             "target_update_interval:16"]  # fmt: skip
#: Overrides that make one update of each SB3 algorithm a few dozen env steps.
TINY_EXTERNAL: dict[str, list[str]] = {
    "sb3_ppo": ["n_envs:2", "n_steps:8", "batch_size:16", "n_epochs:1"],
    "a2c": ["n_envs:2", "n_steps:4"],
    "trpo": ["n_envs:2", "n_steps:16", "batch_size:16", "n_critic_updates:1", "cg_max_steps:2"],
    "ppo_lstm": ["n_envs:2", "n_steps:8", "batch_size:16", "n_epochs:1"],
    "dqn": _TINY_DQN,
    "qrdqn": _TINY_DQN,
    "ars": ["n_envs:1", "n_delta:1", "n_top:1"],
}


def zoo(tmp_path: Path, algo: str, env: str, *argv: str):
    """``train()`` into ``tmp_path/logs`` with a fixed seed, no evaluation, quiet."""
    base = ["--algo", algo, "--env", env, "-f", str(tmp_path / "logs"), "--seed", "0", "--verbose", "0"]
    return train([*base, "--eval-freq", "-1", *argv])


def one_line_error(*argv: str, cwd: Path) -> str:
    """Run ``train.py`` with ``argv``; assert it fails with a one-line ``error:`` and return that line."""
    cmd = [sys.executable, str(ROOT / "train.py"), "-f", str(cwd / "logs"), *argv]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().count("\n") == 0 and out.stderr.startswith("error: "), out.stderr
    assert not (cwd / "logs").exists()  # nothing written
    return out.stderr.strip()


# ----------------------------------------------------------------------------- registry and configs
def test_new_algorithms_are_registered_with_a_config_file() -> None:
    assert set(NEW_ALGOS) | {"sb3_ppo"} == set(registry.EXTERNAL_ALGOS) == set(sb3_algos.ACTION_SPACES)
    assert registry.ALGOS["ppo"] == "tpo_agents.ppo:PPO"  # the paper's critic-free PPO keeps the name
    assert registry.get_algo("sb3_ppo").__module__.startswith("stable_baselines3.ppo")
    assert registry.get_algo("ppo_lstm").__name__ == "RecurrentPPO"
    for algo in registry.EXTERNAL_ALGOS:
        data = yaml.safe_load((CONFIGS / f"{algo}.yml").read_text())
        assert {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "default"} <= set(data), algo
        assert "TPO/TokenReversal-v0" in data and "TPO/MNISTBandit-v0" in data, algo


def test_classic_entries_are_the_rl_zoo_values() -> None:
    """Spot checks against rl-baselines3-zoo's hyperparams/*.yml (2.9.0a2)."""
    load = lambda algo: yaml.safe_load((CONFIGS / f"{algo}.yml").read_text())  # noqa: E731
    assert load("sb3_ppo")["CartPole-v1"]["learning_rate"] == "lin_0.001"
    assert load("dqn")["CartPole-v1"]["train_freq"] == 256
    assert load("dqn")["Acrobot-v1"]["gradient_steps"] == -1
    assert load("qrdqn")["MountainCar-v0"]["policy_kwargs"] == "dict(net_arch=[256, 256], n_quantiles=25)"
    assert load("trpo")["CartPole-v1"]["n_critic_updates"] == 20 and load("a2c")["Acrobot-v1"]["n_envs"] == 16
    ars = load("ars")["MountainCar-v0"]  # the zoo's YAML merge key (<<: *pendulum-params)
    assert (ars["n_delta"], ars["n_top"], ars["learning_rate"], ars["policy"]) == (8, 1, 0.018, "MlpPolicy")
    assert load("ppo_lstm")["Acrobot-v1"]["n_steps"] == 256


@pytest.mark.parametrize(
    ("algo", "env_id", "fits"),
    [(algo, env_id, fits) for algo in sorted(sb3_algos.ACTION_SPACES)
     for env_id, fits in (("CartPole-v1", True), ("Pendulum-v1", algo not in ("dqn", "qrdqn")))],
)  # fmt: skip
def test_space_table_matches_the_constructors(algo: str, env_id: str, fits: bool) -> None:
    """The zoo's table of accepted spaces agrees with what each SB3 constructor accepts."""
    env = gym.make(env_id)
    assert sb3_algos.accepts(algo, env.observation_space, env.action_space) is fits
    policy = algo_kwargs(yaml.safe_load((CONFIGS / f"{algo}.yml").read_text())["default"])["policy"]
    if fits:
        registry.get_algo(algo)(policy, env, device="cpu")
    else:
        with pytest.raises(AssertionError, match="only supports"):
            registry.get_algo(algo)(policy, env, device="cpu")
    env.close()


# ----------------------------------------------------------------------------- train, save, reload
@pytest.mark.slow
@pytest.mark.parametrize("algo", NEW_ALGOS)
def test_trains_on_cartpole_saves_reloads_and_evaluates(tmp_path: Path, algo: str) -> None:
    result = zoo(tmp_path, algo, "CartPole-v1", "-n", "300", "-params", *TINY_EXTERNAL[algo])
    assert result.model.num_timesteps >= 300
    run = Path(result.save_path)
    assert run.parent.name == algo and run.name == "CartPole-v1_1"
    assert list(run.glob("*monitor.csv")), "SB3's Monitor writes the training episodes"
    model = registry.get_algo(algo).load(run / "CartPole-v1.zip", device="cpu")
    assert type(model) is type(result.model) and model.num_timesteps == result.model.num_timesteps
    obs = np.zeros((1, 4), dtype=np.float32)
    action, _ = model.predict(obs, deterministic=True)
    assert action.shape == (1,) and 0 <= int(action[0]) < 2
    if result.model.get_vec_normalize_env() is not None:
        assert (run / "CartPole-v1" / "vecnormalize.pkl").is_file()
    out = evaluate_main(["--algo", algo, "--env", "CartPole-v1", "-f", str(tmp_path / "logs"), "-n", "2"])
    assert out["n_episodes"] == 2 and out["mean_reward"] >= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dqn", "ppo_lstm"])
def test_trains_on_a_tpo_env_with_task_error(tmp_path: Path, algo: str) -> None:
    """An SB3 algorithm on TokenReversal through the SB3 adapter: task error logged and evaluated."""
    result = zoo(tmp_path, algo, "TokenReversal", "-n", "240", "-tb", str(tmp_path / "tb"),
                 "--env-kwargs", "sequence_length:3", "-params", *TINY_EXTERNAL[algo])  # fmt: skip
    run = Path(result.save_path)
    rows = (run / "monitor.csv").read_text().splitlines()
    assert rows[1] == "r,l,t,is_success,token_error" and len(rows) > 10
    out = evaluate_main(["--algo", algo, "--env", "TokenReversal", "-f", str(tmp_path / "logs"), "-n", "4"])
    assert out["n_episodes"] == 4 and 0.0 <= out["task_error"] <= 1.0
    assert out["env_kwargs"]["sequence_length"] == 3


@pytest.mark.slow
def test_schedules_normalize_and_policy_kwargs_reach_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RL Zoo YAML: `lin_` schedules (ARS's learning_rate and delta_std too), `normalize` strings; the
    evaluation uses the run's frozen VecNormalize statistics."""
    result = zoo(tmp_path, "ars", "Acrobot-v1", "-n", "600", "-params", "n_delta:1",
                 "learning_rate:lin_0.018", "delta_std:lin_0.1")  # fmt: skip
    model = result.model
    assert isinstance(model.learning_rate, LinearSchedule)
    assert model.lr_schedule(1.0) == pytest.approx(0.018)
    assert model.delta_std_schedule(0.5) == pytest.approx(0.05)
    normalize = model.get_vec_normalize_env()
    assert normalize is not None and normalize.norm_obs and not normalize.norm_reward
    assert model.policy.action_net[0].out_features == 16  # policy_kwargs "dict(net_arch=[16])"
    seen = []
    spy = lambda model, env, *rest: seen.append(env) or evaluate(model, env, *rest)  # noqa: E731
    monkeypatch.setattr(evaluate_module, "evaluate", spy)
    evaluate_main(["--algo", "ars", "--env", "Acrobot-v1", "-f", str(tmp_path / "logs"), "-n", "1"])
    assert isinstance(seen[0], VecNormalize) and not seen[0].training and not seen[0].norm_reward
    assert np.allclose(seen[0].obs_rms.mean, normalize.obs_rms.mean)
    kwargs = algo_kwargs({"policy": "sb3_contrib.ars.policies.ARSLinearPolicy", "train_freq": [1, "episode"]})
    assert kwargs["policy"].__name__ == "ARSLinearPolicy" and kwargs["train_freq"] == (1, "episode")


@pytest.mark.slow
def test_ars_n_envs_are_async_eval_workers(tmp_path: Path) -> None:
    """As in the RL Zoo: ARS steps one training env; n_envs = 2 evaluates candidates in 2 processes."""
    result = zoo(tmp_path, "ars", "CartPole-v1", "-n", "200", "-params", "n_envs:2", "n_delta:2")
    assert result.model.env.num_envs == 1 and result.model.num_timesteps >= 200


# ----------------------------------------------------------------------------- default env kwargs
def test_default_env_kwargs_stay_with_their_envs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The reported bug: sb3_ppo on CartPole-v1 got the token tasks' env_kwargs from a `default:` entry."""
    token_default = {"n_timesteps": 7, "policy": "MlpPolicy",
                     "env_kwargs": {"reward": "sequential", "sequence_length": 3}}  # fmt: skip
    file = tmp_path / "d.yml"
    file.write_text(yaml.safe_dump({"default": token_default}))
    cartpole = configure(["--algo", "sb3_ppo", "--env", "CartPole-v1", "-params", str(file)])
    assert cartpole.env_kwargs == {} and "env_kwargs" not in cartpole.values
    assert "Not using the 'default' env_kwargs" in capsys.readouterr().out
    token = configure(["--algo", "sb3_ppo", "--env", "TokenCopy", "-params", str(file)])
    # they belong there, over zoo_configs/sb3_ppo.yml's TokenCopy entry (a file given alone layers over it)
    assert token.env_kwargs == {"reward": "sequential", "sequence_length": 3, "vocab_size": 2}
    explicit = tmp_path / "e.yml"  # an env's own entry is never filtered: a wrong key stays an error
    explicit.write_text(yaml.safe_dump({"CartPole-v1": token_default}))
    with pytest.raises(ConfigError, match=r"cannot make CartPole-v1 with env_kwargs .*'reward'"):
        configure(["--algo", "sb3_ppo", "--env", "CartPole-v1", "-params", str(explicit)])


def test_the_reported_command_trains(tmp_path: Path) -> None:
    """``train.py --algo sb3_ppo --env CartPole-v1`` (a TypeError before): the zoo's CartPole-v1 entry."""
    result = zoo(tmp_path, "sb3_ppo", "CartPole-v1", "-n", "256")
    assert result.hyperparams["n_steps"] == 32 and result.model.num_timesteps == 256
    assert (Path(result.save_path) / "CartPole-v1.zip").is_file()


# ----------------------------------------------------------------------------- one-line errors
@pytest.mark.slow
def test_grouped_algorithm_on_cartpole_is_a_one_line_error(tmp_path: Path) -> None:
    line = one_line_error("--algo", "tpo", "--env", "CartPole-v1", cwd=tmp_path)
    assert "'tpo'" in line and "'CartPole-v1' is not one" in line
    assert line.endswith("train it with an SB3 algorithm: a2c, ars, dqn, ppo_lstm, qrdqn, sb3_ppo, trpo")


@pytest.mark.parametrize("algo", ["grpo", "ppo", "ce"])
def test_every_grouped_algorithm_names_the_sb3_algorithms(tmp_path: Path, algo: str) -> None:
    with pytest.raises(ConfigError, match=rf"^'{algo}' learns from groups.*'Acrobot-v1' is not one: "
                       r"train it with an SB3 algorithm: a2c, ars, dqn, ppo_lstm, qrdqn, sb3_ppo, trpo$"):
        configure(["--algo", algo, "--env", "Acrobot-v1", "-f", str(tmp_path)])


def test_grouped_algorithm_on_a_box_action_env_lists_only_fitting_algorithms() -> None:
    with pytest.raises(ConfigError) as err:
        sb3_algos.check_grouped_env("tpo", "Pendulum-v1")
    assert str(err.value).endswith("SB3 algorithm: a2c, ars, ppo_lstm, sb3_ppo, trpo")


def test_sb3_algorithm_on_spaces_it_does_not_take_names_the_ones_that_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        configure(["--algo", "dqn", "--env", "Pendulum-v1", "-f", str(tmp_path)])
    line = str(err.value)
    assert "'dqn' takes Discrete actions" in line and "'Pendulum-v1' has action space Box" in line
    assert line.endswith("use one of: a2c, ars, ppo_lstm, sb3_ppo, trpo") and "\n" not in line


def test_space_descriptions_stay_on_one_line() -> None:
    """A Text space's repr spans lines (its charset): the error names only its type."""
    assert sb3_algos.describe(gym.spaces.Text(10)) == "Text"
    assert sb3_algos.describe(gym.spaces.Box(-2.0, 2.0, (1,))) == "Box(-2.0, 2.0, (1,), float32)"
    varied = gym.spaces.Box(np.zeros(784, np.float32), np.arange(1, 785, dtype=np.float32))
    assert sb3_algos.describe(varied) == "Box"  # 784 different bounds
    text_algos = sb3_algos.grouped_algos("TPO/GraphColor-v0")  # the algorithms with a text mode
    assert "tpo" in text_algos and "ppo" in text_algos and "ce" not in text_algos
