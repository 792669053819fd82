"""Tests of ``python -m tpo_agents.evaluate``: the task error of a saved model over N episodes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tpo_agents.zoo.envs import make_env
from tpo_agents.zoo.evaluate import evaluate, main, run_env_kwargs
from tpo_agents.zoo.hyperparams import ConfigError
from tpo_agents.zoo.train import train

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[3]
ENV_DIR = "TPO-TokenReversal-v0"
TINY_SB3 = ["n_envs:2", "n_steps:8", "batch_size:16", "n_epochs:1"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny SB3-PPO run on TokenReversal (H=4) with a checkpoint and an evaluation."""
    logs = tmp_path_factory.mktemp("eval") / "logs"
    argv = ["--algo", "sb3_ppo", "--env", "TokenReversal", "-f", str(logs), "--seed", "0", "--verbose", "0"]
    argv += ["-n", "32", "--save-freq", "16", "--eval-freq", "32", "--eval-episodes", "2"]
    argv += ["--env-kwargs", "sequence_length:4", "-params", *TINY_SB3]
    return Path(train(argv).save_path)


def base_argv(run: Path) -> list[str]:
    return ["--algo", "sb3_ppo", "--env", "TokenReversal", "-f", str(run.parent.parent)]


def test_reports_task_error_over_n_episodes(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = main([*base_argv(run), "-n", "20", "--n-envs", "4", "--json", str(out)])
    assert result["n_episodes"] == 20 and result["deterministic"]  # greedy by default, as rl_zoo3's enjoy
    assert 0.0 <= result["task_error"] <= 1.0 and 0.0 <= result["success_rate"] <= 1.0
    assert result["env_kwargs"] == {"reward": "bag_of_tokens", "sequence_length": 4, "vocab_size": 2}
    assert result["mean_ep_length"] == 4.0  # the run's env kwargs were used
    assert json.loads(out.read_text())["task_error"] == result["task_error"]


def test_deterministic_is_repeatable_and_seeded_sampling_too(run: Path) -> None:
    greedy = [main([*base_argv(run), "-n", "10", *flag]) for flag in (["--deterministic"], [])]  # the default
    assert greedy[0]["deterministic"] and greedy[0]["task_error"] == greedy[1]["task_error"]
    sampled = [main([*base_argv(run), "-n", "10", "--stochastic", "--seed", "3"]) for _ in range(2)]
    assert not sampled[0]["deterministic"] and sampled[0]["task_error"] == sampled[1]["task_error"]
    with pytest.raises(SystemExit):  # argparse's one line: not allowed with argument --deterministic
        main([*base_argv(run), "--deterministic", "--stochastic"])


def test_model_choices(run: Path) -> None:
    assert main([*base_argv(run), "-n", "2", "--load-best"])["model"].endswith("best_model.zip")
    assert main([*base_argv(run), "-n", "2", "--load-last-checkpoint"])["model"].endswith(
        "rl_model_32_steps.zip"
    )
    assert main([*base_argv(run), "-n", "2", "--load-checkpoint", "16"])["model"].endswith(
        "rl_model_16_steps.zip"
    )
    bare = main(
        [
            *base_argv(run),
            "-n",
            "2",
            "--model",
            str(run / f"{ENV_DIR}.zip"),
            "--env-kwargs",
            "sequence_length:4",
        ]
    )
    assert bare["mean_ep_length"] == 4.0
    with pytest.raises(ConfigError, match="No model at"):
        main([*base_argv(run), "--exp-id", "99"])


def test_evaluate_function_matches_env_infos(run: Path) -> None:
    from stable_baselines3 import PPO

    model = PPO.load(run / f"{ENV_DIR}.zip")
    env = make_env("TPO/TokenReversal-v0", 3, 0, {"sequence_length": 4})
    result = evaluate(model, env, n_episodes=9, deterministic=True)
    env.close()
    assert result["n_episodes"] == 9
    # bag-of-tokens: the episode reward counts correct tokens, so error = 1 - reward / H
    assert np.isclose(result["task_error"], 1.0 - result["mean_reward"] / 4.0)


def test_run_env_kwargs_reads_eval_kwargs(tmp_path: Path) -> None:
    folder = tmp_path / "run" / "TPO-MNISTBandit-v0"
    folder.mkdir(parents=True)
    (folder / "config.yml").write_text(yaml.safe_dump({"eval_env_kwargs": {"split": "test"}}))
    (folder / "args.yml").write_text(yaml.safe_dump({"env_kwargs": {"data_dir": "x"}}))
    assert run_env_kwargs(str(tmp_path / "run"), "TPO-MNISTBandit-v0") == {"data_dir": "x", "split": "test"}


@pytest.mark.slow
def test_command_line(run: Path) -> None:
    cmd = [sys.executable, "-m", "tpo_agents.evaluate", *base_argv(run), "-n", "4"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "4 episodes (greedy): task error" in out.stdout
    out = subprocess.run([*cmd, "--stochastic"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "4 episodes (sampled): task error" in out.stdout
