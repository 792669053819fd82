"""rl_zoo3 run folders: their OrderedDict YAML is read safely; tpo_agents.evaluate and the plots read them."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tpo_agents.zoo import plots
from tpo_agents.zoo.evaluate import main as evaluate_main
from tpo_agents.zoo.evaluate import recorded_run, run_env_kwargs
from tpo_agents.zoo.results import ResultsError, find_runs
from tpo_agents.zoo.run_files import RunFileError, read_run_yaml

torch.set_num_threads(1)

ENV = "CartPole-v1"
#: rl_zoo3's config.yml of ppo on CartPole-v1 (rl-trained-agents), with small sizes.
CONFIG = OrderedDict([("batch_size", 32), ("clip_range", "lin_0.2"), ("ent_coef", 0.0), ("gae_lambda", 0.8),
                      ("gamma", 0.98), ("learning_rate", "lin_0.001"), ("n_envs", 1), ("n_epochs", 1),
                      ("n_steps", 32), ("n_timesteps", 64.0), ("policy", "MlpPolicy")])  # fmt: skip


def zoo_args(seed: int) -> OrderedDict:
    """rl_zoo3's args.yml: every CLI arg, sorted, as an OrderedDict (exp_manager._save_config)."""
    args = {"algo": "ppo", "env": ENV, "env_kwargs": None, "eval_episodes": 2, "eval_freq": 32,
            "gym_packages": [], "hyperparams": None, "log_folder": "logs", "log_interval": -1,
            "n_eval_envs": 1, "n_timesteps": -1, "num_threads": -1, "optimize_hyperparameters": False,
            "save_freq": -1, "seed": seed, "tensorboard_log": "", "trained_agent": "", "uuid": False,
            "vec_env": "dummy", "verbose": 1}  # fmt: skip
    return OrderedDict((key, args[key]) for key in sorted(args))


def write_zoo_runs(logs: Path) -> Path:
    """Two rl_zoo3 runs ``logs/ppo/CartPole-v1_{1,2}``: SB3 PPO zips, 0.monitor.csv, evaluations.npz and the
    OrderedDict YAML files, laid out and written as rl_zoo3's ExperimentManager does; returns ``logs``."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import EvalCallback
    from stable_baselines3.common.env_util import make_vec_env

    for seed in (1, 2):
        run = logs / "ppo" / f"{ENV}_{seed}"
        (run / ENV).mkdir(parents=True)
        env = make_vec_env(ENV, n_envs=1, seed=seed, monitor_dir=str(run))
        eval_env = make_vec_env(ENV, n_envs=1, seed=seed + 100)
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=seed, device="cpu")
        model.learn(64, callback=EvalCallback(eval_env, n_eval_episodes=2, eval_freq=32, log_path=str(run),
                                              best_model_save_path=str(run), verbose=0))  # fmt: skip
        model.save(run / ENV)
        env.close()
        eval_env.close()
        (run / ENV / "config.yml").write_text(yaml.dump(CONFIG))
        (run / ENV / "args.yml").write_text(yaml.dump(zoo_args(seed)))
    return logs


@pytest.fixture(scope="module")
def zoo_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two rl_zoo3 runs of :func:`write_zoo_runs`."""
    return write_zoo_runs(tmp_path_factory.mktemp("rl_zoo3") / "logs")


def test_the_fixture_is_what_safe_load_refuses(zoo_logs: Path) -> None:
    args = zoo_logs / "ppo" / f"{ENV}_1" / ENV / "args.yml"
    assert args.read_text().startswith("!!python/object/apply:collections.OrderedDict\n- - - algo\n")
    with pytest.raises(yaml.constructor.ConstructorError):
        yaml.safe_load(args.read_text())
    assert read_run_yaml(args) == dict(zoo_args(1))
    config = read_run_yaml(args.with_name("config.yml"))
    assert config["learning_rate"] == "lin_0.001" and type(config) is dict


def test_loader_builds_nested_dicts_and_tuples_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "args.yml"
    path.write_text(yaml.dump(OrderedDict([("env_kwargs", OrderedDict([("a", 1)])), ("shape", (2, 3))])))
    assert read_run_yaml(path) == {"env_kwargs": {"a": 1}, "shape": (2, 3)}
    path.write_text("!!python/object/apply:os.system ['echo unsafe']\n")
    with pytest.raises(RunFileError, match=r"^cannot read .*args.yml \(line 1\): could not determine a "
                                           r"constructor for the tag .*os.system'$"):  # fmt: skip
        read_run_yaml(path)
    path.write_text("!!python/object/apply:collections.OrderedDict\n- [1, 2, 3]\n")
    with pytest.raises(RunFileError, match=r"\[key, value\] pairs"):
        read_run_yaml(path)
    path.write_text("- 1\n")
    with pytest.raises(RunFileError, match="must hold a mapping"):
        read_run_yaml(path)
    path.write_text("")
    assert read_run_yaml(path) == {}


def test_evaluate_reads_a_zoo_run(zoo_logs: Path) -> None:
    run = zoo_logs / "ppo" / f"{ENV}_2"
    assert recorded_run(str(run)) == (ENV, dict(zoo_args(2)))
    assert run_env_kwargs(str(run), ENV) == {}
    result = evaluate_main(["--model", str(run), "--algo", "sb3_ppo", "-n", "3", "--deterministic"])
    assert result["env_id"] == ENV and result["model"] == str(run / f"{ENV}.zip")
    assert result["n_episodes"] == 3 and result["mean_reward"] >= 8.0 and "task_error" not in result
    best = evaluate_main(["--model", str(run / "best_model.zip"), "--algo", "sb3_ppo", "-n", "2"])
    assert best["n_episodes"] == 2


def test_plots_read_zoo_runs(zoo_logs: Path, tmp_path: Path) -> None:
    runs = find_runs(str(zoo_logs), ["ppo"], [ENV])
    assert [(run.env_id, run.number) for run in runs] == [(ENV, 1), (ENV, 2)]
    for source in ("monitor", "eval"):
        out = tmp_path / f"{source}.png"
        argv = ["-f", str(zoo_logs), "-e", ENV, "-y", "reward", "--source", source, "-o", str(out)]
        result = plots.main(argv)
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        (row,) = result["rows"]
        assert row["algo"] == "ppo" and row["env"] == ENV and row["seeds"] == 2 and row["task_error"] is None
        assert row["reward"][0] > 0
    with np.load(zoo_logs / "ppo" / f"{ENV}_1" / "evaluations.npz") as data:
        assert data["results"].shape == (2, 2)


def test_plots_name_rl_zoo3_s_monitor_file_where_the_task_error_is_missing(zoo_logs: Path, tmp_path: Path
                                                                           ) -> None:  # fmt: skip
    with pytest.raises(ResultsError, match=r"^ppo on CartPole-v1 \(2 runs in .*logs/ppo\): rl_zoo3's monitor "
                                           r"file has no task_error column \(no token_error or is_success; "
                                           r"monitor columns: r, l, t\); use -y reward$"):  # fmt: skip
        plots.main(["-f", str(zoo_logs), "-o", str(tmp_path / "fig.png")])


def test_a_broken_args_yml_is_one_line_in_the_plots(zoo_logs: Path, tmp_path: Path) -> None:
    run = tmp_path / "logs" / "ppo" / f"{ENV}_1"
    (run / ENV).mkdir(parents=True)
    (run / "0.monitor.csv").write_text((zoo_logs / "ppo" / f"{ENV}_1" / "0.monitor.csv").read_text())
    (run / ENV / "args.yml").write_text("!!python/object/new:builtins.print []\n")
    with pytest.raises(ResultsError, match=r"^cannot read .*args.yml \(line 1\): could not determine"):
        find_runs(str(tmp_path / "logs"))
