"""Tests of ``python -m tpo_agents.enjoy``: watch a trained agent, episode by episode, in the terminal."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tpo_agents.zoo.enjoy import FinalRender, main
from tpo_agents.zoo.hyperparams import ConfigError
from tpo_agents.zoo.train import train

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[3]
H = 4  # tokens per episode of the trained run
ARGV = ["--algo", "tpo", "--env", "TokenReversal"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny TPO run on TokenReversal (H=4, 2 updates of 8 prompts) and a tiny TPO run on a bandit."""
    folder = tmp_path_factory.mktemp("enjoy") / "logs"
    common = ["-f", str(folder), "--seed", "0", "--verbose", "0", "--eval-freq", "-1", "-tb", ""]
    train(["--algo", "tpo", "--env", "TokenReversal", "-n", str(2 * 8 * H), *common,
           "--env-kwargs", f"sequence_length:{H}", "-params", "batch_size:8", "group_size:2",
           "n_epochs:1"])  # fmt: skip
    train(["--algo", "tpo", "--env", "MultiContextBandit", "-n", "40", *common,
           "--env-kwargs", "n_contexts:3", "n_arms:4", "-params", "batch_size:8"])  # fmt: skip
    return folder


def test_prints_rendered_episodes_and_a_summary(logs: Path, capsys: pytest.CaptureFixture) -> None:
    result = main(["--algo", "tpo", "--env", "TokenReversal", "-f", str(logs), "-n", str(3 * H)])
    out = capsys.readouterr().out
    assert result["n_episodes"] == 3 and result["lengths"] == [H] * 3 and result["deterministic"]
    assert result["env_kwargs"]["sequence_length"] == H  # the run's env kwargs
    # Each episode: its line, then the final state: prompt, target and the agent's tokens.
    episodes = re.findall(r"Episode (\d): return ([\d.]+), length 4, task error ([\d.]+)\n"
                          r"reverse_copy, bag_of_tokens reward: step 4/4, return (\d+)\n"
                          r"prompt ((?: +\d){4})\ntarget ((?: +\d){4})\nagent  (.*)\n", out)
    assert [int(e[0]) for e in episodes] == [1, 2, 3]
    for number, ret, error, rendered_ret, prompt, target, agent in episodes:
        assert float(ret) == float(rendered_ret) == result["returns"][int(number) - 1]
        assert float(error) == pytest.approx(1 - float(ret) / H, abs=1e-4)  # bag of tokens
        assert target.split() == prompt.split()[::-1]  # reverse copy
        tokens = re.findall(r"\[(\d)\]| (\d)", agent)  # wrong tokens in brackets
        marked = [wrong != "" for wrong, _ in tokens]
        assert marked == [t != (w or r) for t, (w, r) in zip(target.split(), tokens, strict=True)]
    mean_error = sum(1 - r / H for r in result["returns"]) / 3
    assert result["task_error"] == pytest.approx(mean_error)
    assert f"3 episodes in {3 * H} steps (greedy): mean return" in out
    assert f"mean task error {mean_error:.4f}" in out


def test_steps_not_episodes_and_sampling(logs: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(logs), "-n", "9", "--n-envs", "2"]
    sampled = [main([*argv, "--stochastic", "--seed", "3", "--no-render"]) for _ in range(2)]
    assert sampled[0]["n_episodes"] == 4  # 9 steps of 2 envs: 2 episodes each (4 steps per episode)
    assert sampled[0]["returns"] == sampled[1]["returns"] and not sampled[0]["deterministic"]
    out = capsys.readouterr().out
    assert "Episode 1 (env 0)" in out and "Episode 2 (env 1)" in out and "prompt" not in out


def test_bandit_episodes_show_context_action_arm_and_reward(logs: Path, capsys: pytest.CaptureFixture):
    result = main(["--algo", "tpo", "--env", "MultiContextBandit", "-f", str(logs), "-n", "5"])
    lines = re.findall(r"context (\d) \| action (\d) \| correct arm 0 \| reward ([01]) \((right|wrong)\)",
                       capsys.readouterr().out)  # fmt: skip
    assert len(lines) == result["n_episodes"] == 5
    assert [float(reward) for *_, reward, _ in lines] == result["returns"]
    for _, action, reward, verdict in lines:
        assert (action == "0") == (reward == "1") == (verdict == "right")


def test_an_sb3_algorithm_on_an_env_without_text_rendering(tmp_path: Path, capsys: pytest.CaptureFixture):
    folder = tmp_path / "logs"
    train(["--algo", "sb3_ppo", "--env", "CartPole-v1", "-n", "32", "-f", str(folder), "--verbose", "0",
           "--eval-freq", "-1", "-tb", "", "-params", "n_envs:1", "n_steps:32", "batch_size:32",
           "n_epochs:1"])  # fmt: skip
    result = main(["--algo", "sb3_ppo", "--env", "CartPole-v1", "-f", str(folder), "-n", "60"])
    out = capsys.readouterr().out
    assert "CartPole-v1 has no text rendering" in out and result["n_episodes"] >= 1
    assert "task_error" not in result and re.search(r"Episode 1: return [\d.]+, length \d+\n", out)


def test_final_render_wrapper_keeps_the_last_state() -> None:
    import gymnasium as gym

    env = FinalRender(gym.make("TPO/KArmedBandit-v0", n_arms=3, render_mode="ansi"))
    env.reset(seed=0)
    info = env.step(2)[-1]
    assert info["final_render"] == "context 0 | action 2 | correct arm 0 | reward 0 (wrong)"


def test_errors(logs: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"No run of tpo on TPO-TokenCopy-v0 in .*tpo \(no folder"):
        main(["--algo", "tpo", "--env", "TokenCopy", "-f", str(logs)])
    with pytest.raises(ConfigError, match="Unknown algorithm 'tpoo'. Did you mean 'tpo'"):
        main(["--algo", "tpoo", "--env", "TokenReversal", "-f", str(logs)])
    with pytest.raises(ConfigError, match=r"does not fit TPO/TokenReversal-v0 .*Observation spaces"):
        main([*ARGV, "-f", str(logs), "--env-kwargs", "sequence_length:3"])
    with pytest.raises(ConfigError, match="-n and --n-envs must be positive, got 0 and 1"):
        main(["--algo", "tpo", "--env", "TokenReversal", "-f", str(logs), "-n", "0"])


@pytest.mark.slow
def test_command_line(logs: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "tpo_agents.enjoy", "--algo", "tpo", "--env", "TokenReversal",
           "-f", str(logs)]
    out = subprocess.run([*cmd, "-n", str(2 * H)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "target" in out.stdout and "2 episodes in 8 steps (greedy)" in out.stdout
    missing = subprocess.run([*cmd[:-1], str(tmp_path / "none")], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    assert missing.returncode == 1 and missing.stderr.startswith("error: No run of tpo")
    assert len(missing.stderr.strip().splitlines()) == 1
