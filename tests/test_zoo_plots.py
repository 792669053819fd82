"""Tests of ``python -m agents.zoo.plots`` (``agents.zoo.plots``, ``agents.zoo.results``) on run folders
written by tiny real ``train()`` runs: the PNG, the score table against hand-computed means, the
axes (timesteps, episodes, updates; task error, reward, success), the eval source, and the errors."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from agents.zoo import plots, results
from agents.zoo.train import train

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
BANDIT = "TPO-KArmedBandit-v0"
B = 4  # episodes per update of the grouped runs


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two TPO seeds and one GRPO seed on a 4-armed bandit (10 updates of B=4 episodes), two sb3_ppo
    seeds on CartPole-v1, one CE run (population mode: no monitor rows) with evaluations."""
    folder = tmp_path_factory.mktemp("plots") / "logs"
    common = ["-f", str(folder), "--verbose", "0", "-tb", ""]
    bandit = ["--env", "KArmedBandit", "-n", str(10 * B), "--env-kwargs", "n_arms:4", "--eval-freq", "-1"]
    for algo, seed in (("tpo", 1), ("tpo", 2), ("grpo", 1)):
        train(["--algo", algo, *bandit, "--seed", str(seed), *common, "-params", f"batch_size:{B}"])
    for seed in (1, 2):
        train(["--algo", "sb3_ppo", "--env", "CartPole-v1", "-n", "200", "--seed", str(seed), *common,
               "--eval-freq", "64", "--eval-episodes", "2", "-params", "n_envs:2", "n_steps:16",
               "batch_size:32", "n_epochs:1"])  # fmt: skip
    train(["--algo", "ce", "--env", "MultiContextBandit", "-n", "20", "--seed", "1", *common, "--eval-freq",
           "10", "--eval-episodes", "3", "--env-kwargs", "n_contexts:5", "n_arms:3"])  # fmt: skip
    return folder


def monitor_rows(run: Path) -> list[dict[str, str]]:
    """The rows of a run's single monitor.csv, read with the csv module."""
    with open(run / "monitor.csv") as f:
        next(f)
        return list(csv.DictReader(f))


def se(values: list[float]) -> float:
    """The standard error of the seed mean: population std / sqrt(n), as the paper's figures."""
    return float(np.std(values) / np.sqrt(len(values)))


def run_plots(logs: Path, tmp_path: Path, *argv: str) -> dict:
    return plots.main(["-f", str(logs), "-o", str(tmp_path / "fig.png"), *argv])


def assert_png(path: Path) -> None:
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


# ------------------------------------------------------------------------------------ runs found
def test_runs_are_found_with_their_env_ids(logs: Path) -> None:
    found = {(run.algo, run.env_id, run.number) for run in results.list_runs(str(logs))}
    bandit = "TPO/KArmedBandit-v0"
    assert found == {
        ("tpo", bandit, 1), ("tpo", bandit, 2), ("grpo", bandit, 1), ("sb3_ppo", "CartPole-v1", 1),
        ("sb3_ppo", "CartPole-v1", 2), ("ce", "TPO/MultiContextBandit-v0", 1),
    }  # fmt: skip
    out = plots.main(["-f", str(logs), "-a", "tpo"])  # default output: <log-folder>/plots/<y>-<x>.png
    assert_png(Path(out["figure"])) and Path(out["figure"]) == logs / "plots" / "task_error-timesteps.png"
    assert len(results.list_runs(str(logs))) == len(found)  # the plots folder is not taken for an algorithm
    short = results.find_runs(str(logs), ["TPO"], ["KArmedBandit"])  # case-insensitive algo, short env name
    assert {run.number for run in short} == {1, 2}


# ------------------------------------------------------------------------------------ the table
def test_task_error_table_equals_hand_computed_means(logs: Path, tmp_path: Path) -> None:
    out = run_plots(logs, tmp_path, "-a", "tpo", "-e", "KArmedBandit", "-w", "6", "--table",
                    str(tmp_path / "t.md"))  # fmt: skip
    assert_png(tmp_path / "fig.png")
    finals_error, finals_reward = [], []
    for seed in (1, 2):
        rows = monitor_rows(logs / "tpo" / f"{BANDIT}_{seed}")
        assert len(rows) == 10 * B
        finals_error.append(np.mean([1.0 - (row["is_success"] == "True") for row in rows[-6:]]))
        finals_reward.append(np.mean([float(row["r"]) for row in rows[-6:]]))
    (row,) = out["rows"]
    assert (row["algo"], row["env"], row["seeds"]) == ("tpo", "TPO/KArmedBandit-v0", 2)
    assert row["timesteps"] == 10 * B
    assert row["task_error"] == pytest.approx((np.mean(finals_error), se(finals_error)))
    assert row["reward"] == pytest.approx((np.mean(finals_reward), se(finals_reward)))
    cell = f"{np.mean(finals_error):.4f} ± {se(finals_error):.4f}"
    assert f"| tpo | TPO/KArmedBandit-v0 | 2 | {10 * B} | {cell} |" in out["table"]
    assert (tmp_path / "t.md").read_text().strip() == out["table"]


def test_updates_axis_averages_each_batch(logs: Path, tmp_path: Path) -> None:
    """Each update's point is the mean task error of its batch of B episodes (rows sharing one ``t``)."""
    run = next(r for r in results.list_runs(str(logs)) if r.algo == "grpo")
    x, y = results.series(run, "updates", "task_error")
    rows = monitor_rows(Path(run.path))
    errors = [1.0 - (row["is_success"] == "True") for row in rows]
    assert x.tolist() == list(range(1, 11))
    assert y == pytest.approx([np.mean(errors[k * B : (k + 1) * B]) for k in range(10)])
    out = run_plots(logs, tmp_path, "-a", "grpo", "-x", "updates")
    assert out["rows"][0]["task_error"][0] == pytest.approx(y[-1])  # window 1: the last update
    assert np.isnan(out["rows"][0]["task_error"][1])  # one seed: no standard error
    assert f"| grpo | TPO/KArmedBandit-v0 | 1 | {10 * B} | {y[-1]:.4f} |" in out["table"]


def test_reward_curves_over_seeds_several_algos_and_envs(logs: Path, tmp_path: Path) -> None:
    """One figure: a panel per env, an aggregated curve per algo; CartPole has no task error (n/a)."""
    out = run_plots(logs, tmp_path, "-a", "tpo", "grpo", "sb3_ppo", "-y", "reward", "-x", "episodes",
                    "-w", "3")  # fmt: skip
    assert_png(tmp_path / "fig.png")
    by_algo = {row["algo"]: row for row in out["rows"]}
    assert set(by_algo) == {"tpo", "grpo", "sb3_ppo"} and by_algo["sb3_ppo"]["task_error"] is None
    finals = []
    for seed in (1, 2):
        data = results.read_monitor(str(logs / "sb3_ppo" / f"CartPole-v1_{seed}"))
        finals.append(float(data["r"].to_numpy()[-3:].mean()))
    assert by_algo["sb3_ppo"]["reward"] == pytest.approx((np.mean(finals), se(finals)))
    assert "| sb3_ppo | CartPole-v1 | 2 |" in out["table"] and "| n/a |" in out["table"]


def test_mean_and_standard_error_band() -> None:
    curves = [results.Curve(np.array([0.0, 10.0]), np.array([1.0, 3.0])),
              results.Curve(np.array([0.0, 5.0, 10.0]), np.array([3.0, 3.0, 3.0]))]  # fmt: skip
    grid, mean, stderr = results.aggregate(curves, n_points=3)
    assert grid.tolist() == [0.0, 5.0, 10.0]
    assert mean.tolist() == [2.0, 2.5, 3.0]
    assert stderr == pytest.approx(np.array([1.0, 0.5, 0.0]) / np.sqrt(2))  # population std / sqrt(2)
    smoothed = results.smooth(np.arange(1.0, 6.0), np.array([1.0, 2.0, 3.0, 4.0, 5.0]), 2)
    assert smoothed.x.tolist() == [2.0, 3.0, 4.0, 5.0] and smoothed.y.tolist() == [1.5, 2.5, 3.5, 4.5]


def test_eval_source_reads_evaluations(logs: Path, tmp_path: Path) -> None:
    """--source eval: population mode (no monitor rows) still plots, from evaluations.npz."""
    out = run_plots(logs, tmp_path, "-a", "ce", "--source", "eval")
    assert_png(tmp_path / "fig.png")
    with np.load(logs / "ce" / "TPO-MultiContextBandit-v0_1" / "evaluations.npz") as data:
        error, reward = data["task_errors"][-1].mean(), data["results"][-1].mean()
        last = data["timesteps"][-1]
    assert out["rows"][0]["task_error"][0] == pytest.approx(error)
    assert out["rows"][0]["reward"][0] == pytest.approx(reward) and out["rows"][0]["timesteps"] == last


def test_runs_without_the_data_are_left_out_with_a_note(
    logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = run_plots(logs, tmp_path)  # everything, task error over timesteps
    assert {row["algo"] for row in out["rows"]} == {"tpo", "grpo"}
    printed = capsys.readouterr().out
    assert "Left out" in printed and "CartPole-v1 defines no task error" in printed
    assert "no monitor.csv (population mode" in printed


# ------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-a", "dqn"], r"no runs of dqn in .*logs/<algo>/<Env>_<N>; found: ce: TPO/MultiContextBandit-v0 "
                        r"\(1 run\); grpo: "),
        (["-a", "sb3_ppo", "-e", "TokenReversal"], r"no runs of TokenReversal in .*logs/\{sb3_ppo\}; found: "
                                                   r"sb3_ppo: CartPole-v1 \(2 runs\)"),
        (["-a", "sb3_ppo"], r"CartPole-v1 defines no task error \(monitor columns: .*; use -y reward"),
        (["-a", "sb3_ppo", "-x", "updates", "-y", "reward"], r"-x updates needs runs of the grouped"),
        (["-a", "ce", "-y", "reward"], r"no monitor.csv \(population mode .*use --source eval"),
        (["-a", "ce", "--source", "eval", "-x", "episodes"], r"--source eval has only -x timesteps"),
        (["-a", "tpo", "-w", "0"], r"--window must be a positive"),
    ],
)  # fmt: skip
def test_one_line_errors(logs: Path, tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(results.ResultsError, match=message) as err:
        run_plots(logs, tmp_path, *argv)
    assert "\n" not in str(err.value)


def test_command_line_error_names_where_it_looked(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "agents.zoo.plots", "-f", str(tmp_path / "nowhere")]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode != 0
    assert out.stderr.strip() == f"error: log folder '{tmp_path / 'nowhere'}' does not exist"
    (tmp_path / "empty").mkdir()
    with pytest.raises(results.ResultsError, match=r"no run folders \(<algo>/<Env>_<N>\) in .*empty"):
        results.find_runs(str(tmp_path / "empty"))
