"""Tests of the zoo's checks and records: bad values are one ``error:`` line before any file is written,
the run folder records what ran, evaluation rebuilds the run's env, and the terminal stays quiet."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tpo_agents import DG, GRPO, PPO, TPO, GroupPG
from tpo_agents.checks import HyperparameterError
from tpo_agents.zoo import callbacks as cb
from tpo_agents.zoo import evaluate as zoo_evaluate
from tpo_agents.zoo import registry
from tpo_agents.zoo.cli import build_parser
from tpo_agents.zoo.run import MAX_TABLES, build_callbacks, default_log_interval
from tpo_agents.zoo.train import configure, main, train

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[3]
ENV_DIR = "TPO-TokenReversal-v0"
#: B = 4 contexts, K = 2, H = 3: 12 env steps per token-mode update.
TINY_GROUP = ["batch_size:4", "group_size:2"]
TINY_TOKENS = ["sequence_length:3"]
TINY_SB3 = ["n_envs:2", "n_steps:8", "batch_size:16", "n_epochs:1"]
#: A 24-step TPO run of the tiny token task.
TINY_RUN = ["-n", "24", "--env-kwargs", *TINY_TOKENS, "-params", *TINY_GROUP]


def zoo_argv(tmp_path: Path, algo: str, *extra: str, env: str = "TokenReversal") -> list[str]:
    """A quiet, seeded, evaluation-free command into ``tmp_path/logs``."""
    return ["--algo", algo, "--env", env, "-f", str(tmp_path / "logs"), "--seed", "0", "--verbose", "0",
            "--eval-freq", "-1", *extra]  # fmt: skip


def error_line(argv: list[str]) -> str:
    """The message ``train.py`` exits with (it must exit)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return str(exc.value.code)


# ------------------------------------------------------------------------ bad values: one line, no files
BAD_VALUES = [
    ("tpo", ["-params", "eta:abc"], "eta='abc' (in --hyperparams override): must be a number > 0"),
    ("tpo", ["-params", "eta:0"], "eta=0 (in --hyperparams override): must be a number > 0"),
    ("tpo", ["-params", "eta:-1"], "eta=-1 (in --hyperparams override): must be a number > 0"),
    ("tpo", ["-params", "group_size:1"], "group_size=1 (in --hyperparams override): must be an integer >= 2 "
                                         "in token mode"),
    ("grpo", ["-params", "group_mode:sequence", "group_size:1"], "group_size=1 (in --hyperparams override)"),
    ("tpo", ["-params", "learning_rate:-0.1"], "learning_rate=-0.1 (in --hyperparams override): must be a "
                                               "number > 0 or a schedule"),
    ("ppo", ["-params", "learning_rate:lin_-1"], "learning_rate='lin_-1' (in --hyperparams override)"),
    ("tpo", ["-params", "n_epochs:0"], "n_epochs=0 (in --hyperparams override): must be an integer >= 1"),
    ("tpo", ["-params", "batch_size:2.5"], "batch_size=2.5 (in --hyperparams override): must be an integer"),
    ("grpo", ["-params", "beta:-0.1"], "beta=-0.1 (in --hyperparams override): must be a number >= 0"),
    ("grpo", ["-params", "clip_range:0"], "clip_range=0 (in --hyperparams override): must be a number > 0"),
    ("dg", ["-params", "eta:0"], "eta=0 (in --hyperparams override): must be a number > 0"),
    ("tpo", ["-params", "anchor:maybe"], "anchor='maybe' (in --hyperparams override): must be True or False"),
    ("tpo", ["-params", "n_timesteps:abc"], "n_timesteps='abc' (in --hyperparams override)"),
    ("tpo", ["--env-kwargs", "vocab_size:1"], "vocab_size must be an integer >= 2, got 1"),
    ("tpo", ["--env-kwargs", "colour:3"], "unexpected keyword argument 'colour'"),
    ("tpo", ["--eval-freq", "100", "--eval-episodes", "0"], "--eval-episodes 0: must be an integer >= 1"),
    ("sb3_ppo", ["-params", "n_epochs:0"], "n_epochs=0 (in --hyperparams override): must be an integer >= 1"),
    ("sb3_ppo", ["-params", "gamma:1.5"], "gamma=1.5 (in --hyperparams override): must be a number in "
                                          "[0, 1]"),
    ("sb3_ppo", ["-params", "learning_rate:-1"], "learning_rate=-1 (in --hyperparams override)"),
    ("sb3_ppo", ["--env-kwargs", "vocab_size:1"], "vocab_size must be an integer >= 2, got 1"),
    # SB3's own check, in its constructor: the run folder already exists then, and is removed again
    ("sb3_ppo", ["-params", "n_envs:1", "n_steps:1"], "sb3_ppo: `n_steps * n_envs` must be greater than 1"),
]  # fmt: skip


@pytest.mark.parametrize(("algo", "extra", "message"), BAD_VALUES)
def test_bad_value_is_one_error_line_and_leaves_nothing(tmp_path: Path, algo: str, extra: list[str],
                                                        message: str) -> None:  # fmt: skip
    n = [] if "n_timesteps:abc" in extra else ["-n", "48"]
    line = error_line(zoo_argv(tmp_path, algo, *n, *extra))
    assert line.startswith("error: ") and "\n" not in line
    assert message in line, line
    assert not (tmp_path / "logs").exists()


def test_eval_env_of_other_spaces_is_refused_before_any_file(tmp_path: Path) -> None:
    line = error_line(zoo_argv(tmp_path, "tpo", *TINY_RUN, "--eval-freq", "12",
                               "--eval-env-kwargs", "vocab_size:4"))  # fmt: skip
    assert line.startswith("error: --eval-env-kwargs {") and "\n" not in line
    assert "observation space" in line and "MultiDiscrete" in line
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("n", ["-5", "0", "-2"])
def test_non_positive_n_timesteps_is_refused(tmp_path: Path, n: str) -> None:
    line = error_line(zoo_argv(tmp_path, "tpo", "-n", n))
    assert line == f"error: -n {n}: must be an integer >= 1, or -1 (the YAML's value)"
    assert not (tmp_path / "logs").exists()


def test_trained_agent_of_another_algorithm_is_refused(tmp_path: Path) -> None:
    run = train(zoo_argv(tmp_path, "tpo", *TINY_RUN))
    zoo_zip = os.path.join(run.save_path, f"{ENV_DIR}.zip")
    line = error_line(zoo_argv(tmp_path / "next", "grpo", *TINY_RUN, "-i", zoo_zip))
    assert line == f"error: --trained-agent {zoo_zip} was trained with --algo tpo, not grpo: pass --algo tpo"
    bare = tmp_path / "tpo_model.zip"  # saved outside the zoo: no run folder records the algorithm
    TPO("TransformerPolicy", "TPO/TokenReversal-v0", env_kwargs={"sequence_length": 3}, batch_size=4,
        group_size=2, seed=0).save(bare)
    line = error_line(zoo_argv(tmp_path / "next", "grpo", *TINY_RUN, "-i", str(bare)))
    assert line.startswith(f"error: --trained-agent {bare} holds anchor, eta of the grouped algorithms' own")
    assert "trained by one of tpo, tpo_no_anchor, tpo_1ep, not grpo" in line
    assert not (tmp_path / "next").exists()
    again = train(zoo_argv(tmp_path, "tpo", *TINY_RUN, "-i", str(bare)))  # the right algorithm continues
    assert again.model.num_timesteps >= 24


def test_main_exits_non_zero_with_the_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(zoo_argv(tmp_path, "tpo", "-n", "-5"))
    assert exc.value.code != 0 and str(exc.value.code).startswith("error: -n -5")


@pytest.mark.parametrize("algo", ["tpo", "sb3_ppo"])
def test_failed_start_keeps_the_run_number(tmp_path: Path, algo: str) -> None:
    """A start that fails after the run folder was made (SB3's constructor) removes it and its number."""
    tiny = TINY_GROUP if algo == "tpo" else TINY_SB3
    error_line(zoo_argv(tmp_path, algo, "-n", "48", "-params", *tiny, "n_epochs:0"))
    error_line(zoo_argv(tmp_path, "sb3_ppo", "-n", "48", "-params", "n_envs:1", "n_steps:1"))
    result = train(zoo_argv(tmp_path, algo, "-n", "16", "--env-kwargs", *TINY_TOKENS, "-params", *tiny))
    assert result.save_path.endswith(f"{ENV_DIR}_1")
    assert sorted(os.listdir(tmp_path / "logs")) == sorted({algo, "tensorboard"})


def test_unusable_model_or_log_folder_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    for algo in ("tpo", "sb3_ppo"):
        line = error_line(zoo_argv(tmp_path, algo, "-n", "48", "-i", str(bad)))
        assert line.startswith(f"error: cannot load --trained-agent {bad}: ") and "zip" in line
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    line = error_line(["--algo", "tpo", "-f", str(blocker / "logs"), "--verbose", "0", "-n", "48"])
    assert line.startswith("error: cannot create the run folder") and "\n" not in line
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_command_lines_print_no_traceback(tmp_path: Path) -> None:
    """The real ``train.py`` and ``python -m tpo_agents.evaluate``: exit code 1, one stderr line."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    logs = str(tmp_path / "logs")
    train_cmd = [sys.executable, "train.py", "--algo", "tpo", "-f", logs, "-params", "eta:-1"]
    out = subprocess.run(train_cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr.strip() == "error: eta=-1 (in --hyperparams override): must be a number > 0"
    assert not (tmp_path / "logs").exists()
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"PK not really")
    eval_cmd = [sys.executable, "-m", "tpo_agents.evaluate", "--model", str(bad)]
    out = subprocess.run(eval_cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith(f"error: cannot load {bad} as tpo: ") and out.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (TPO, {"eta": -1}, "eta=-1: must be a number > 0"),
        (TPO, {"group_size": 1}, "group_size=1: must be an integer >= 2 in token mode"),
        (TPO, {"learning_rate": 0.0}, "learning_rate=0.0: must be a number > 0 or a schedule"),
        (TPO, {"kl_coef": -1e-3}, "kl_coef=-0.001: must be a number >= 0"),
        (GRPO, {"beta": -0.04}, "beta=-0.04: must be a number >= 0"),
        (GRPO, {"clip_range": -0.2}, "clip_range=-0.2: must be a number > 0 or a schedule"),
        (PPO, {"clip_range": float("nan")}, "clip_range=nan"),
        (DG, {"eta": "1"}, "eta='1': must be a number > 0"),
        (GroupPG, {"eta": 0}, "eta=0: must be a number > 0"),
        (TPO, {"group_mode": "tokens"}, "group_mode='tokens': must be one of 'token', 'sequence'"),
    ],
)  # fmt: skip
def test_constructors_check_their_values(cls: type, kwargs: dict, message: str) -> None:
    with pytest.raises(HyperparameterError) as exc:
        cls("TransformerPolicy", "TPO/TokenReversal-v0", env_kwargs={"sequence_length": 3}, **kwargs)
    assert isinstance(exc.value, ValueError) and str(exc.value).startswith(message)


def test_single_mode_takes_group_size_one() -> None:
    """K is not a group in single mode (one sample per context): group_size 1 is allowed there."""
    model = TPO("TransformerPolicy", "TPO/TokenReversal-v0", env_kwargs={"sequence_length": 3},
                group_mode="single", group_size=1, batch_size=4)  # fmt: skip
    model.learn(n_iterations=1)
    assert model.num_timesteps == 12


# ------------------------------------------------------------------------------- what ran is recorded
@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TPO run with -n and --env-kwargs that differ from the YAML entry (V = 3, H = 3)."""
    logs = tmp_path_factory.mktemp("small") / "logs"
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(logs), "--seed", "0", "--verbose", "0",
            "--eval-freq", "-1", "-n", "48", "--env-kwargs", "vocab_size:3", *TINY_TOKENS,
            "-params", *TINY_GROUP]
    return Path(train(argv).save_path)  # fmt: skip


RAN_KWARGS = {"reward": "bag_of_tokens", "sequence_length": 3, "vocab_size": 3}


def test_recorded_config_is_what_ran(small_run: Path) -> None:
    config = yaml.safe_load((small_run / ENV_DIR / "config.yml").read_text())
    args = yaml.safe_load((small_run / ENV_DIR / "args.yml").read_text())
    assert config["n_timesteps"] == args["n_timesteps"] == 48
    assert config["env_kwargs"] == args["env_kwargs"] == RAN_KWARGS
    assert config["batch_size"] == 4 and config["group_size"] == 2
    model = TPO.load(small_run / f"{ENV_DIR}.zip")
    assert model.env_kwargs == RAN_KWARGS and model.num_timesteps == 48


def test_printed_hyperparameters_are_what_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    configure(["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path), "-n", "48",
               "--env-kwargs", "vocab_size:4", "sequence_length:5"])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    printed = next(line for line in lines if line.startswith("Hyperparameters:"))
    assert "'n_timesteps': 48" in printed
    assert "'env_kwargs': {'reward': 'bag_of_tokens', 'sequence_length': 5, 'vocab_size': 4}" in printed


def test_evaluate_rebuilds_the_runs_env(small_run: Path) -> None:
    """``--model`` on a run's zip, on the zip without ``.zip``, and on the run folder: the run's algorithm,
    env and env kwargs, with no --algo/--env/--env-kwargs given."""
    for model in (small_run / f"{ENV_DIR}.zip", small_run / ENV_DIR, small_run):
        result = zoo_evaluate.main(["--model", str(model), "-n", "4"])
        assert result["env_kwargs"] == RAN_KWARGS and result["mean_ep_length"] == 3.0
        assert result["model"] == str(small_run / f"{ENV_DIR}.zip")


def test_load_without_zip_next_to_the_same_named_folder(small_run: Path) -> None:
    assert (small_run / ENV_DIR).is_dir()
    model = TPO.load(str(small_run / ENV_DIR))
    assert model.num_timesteps == 48


def test_evaluate_on_cartpole_reports_reward_not_nan(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = train(zoo_argv(tmp_path, "sb3_ppo", "-n", "32", "-params", *TINY_SB3, env="CartPole-v1"))
    capsys.readouterr()
    result = zoo_evaluate.main(["--model", run.save_path, "-n", "3"])
    out = capsys.readouterr().out
    assert result["env_id"] == "CartPole-v1" and "task_error" not in result
    assert "3 episodes (greedy): mean reward" in out and "nan" not in out and "task error" not in out
    assert "success rate" not in out  # CartPole reports no is_success
    with_success = {**result, "success_rate": 0.5}
    assert "success rate 0.5000" in zoo_evaluate.report(with_success, "m.zip")


# ---------------------------------------------------------------------------------------- the terminal
def test_default_log_interval_prints_about_fifty_tables() -> None:
    assert default_log_interval(1_000_000, 1_000) == 20  # the quick start: 1000 updates, 50 tables
    assert -(-1000 // default_log_interval(1_000_000, 1_000)) <= MAX_TABLES
    assert default_log_interval(120, 12) == 1  # 10 updates: every one
    assert default_log_interval(10**9, 1) * MAX_TABLES >= 10**9


def test_table_every_log_interval_and_tensorboard_every_update(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """10 updates, ``--log-interval 4``: tables after updates 4, 8 and the last; TensorBoard gets all 10.
    The run folder and the TensorBoard command come first; TensorBoard is on by default."""
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path / "logs"), "--seed", "0",
            "--eval-freq", "-1", "-n", "120", "--log-interval", "4", "--no-progress",
            "--env-kwargs", *TINY_TOKENS, "-params", *TINY_GROUP]  # fmt: skip
    result = train(argv)
    out = capsys.readouterr().out
    tables = [line for line in out.splitlines() if "total_timesteps" in line]
    assert [int(line.split("|")[2]) for line in tables] == [48, 96, 120]
    assert out.index(f"Run folder: {result.save_path}") < out.index("total_timesteps")
    assert f"TensorBoard: tensorboard --logdir {tmp_path / 'logs' / 'tensorboard'}" in out
    from tests.tpo_agents.zoo.test_zoo import tb_tags

    tags = tb_tags(tmp_path / "logs" / "tensorboard" / ENV_DIR / "TPO_1")
    assert [step for step, _ in tags["rollout/task_error"]] == [12 * k for k in range(1, 11)]


def test_empty_tensorboard_flag_turns_it_off(tmp_path: Path) -> None:
    train(zoo_argv(tmp_path, "tpo", "-n", "12", "-tb", "", "--env-kwargs", *TINY_TOKENS,
                   "-params", *TINY_GROUP))  # fmt: skip
    assert os.listdir(tmp_path / "logs") == ["tpo"]
    assert not glob.glob(str(tmp_path / "**" / "events.out.tfevents*"), recursive=True)


def test_progress_bar_is_on_by_default(tmp_path: Path) -> None:
    base = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path), "--eval-freq", "-1"]
    cases = (([], True), (["--no-progress"], False), (["-P"], True), (["--verbose", "0"], False))
    for extra, expected in cases:
        setup = configure([*base, *extra])
        assert any(isinstance(c, cb.ProgressBar) for c in build_callbacks(setup, None)) is expected, extra


def test_help_shows_defaults_examples_and_lists() -> None:
    text = build_parser().format_help()
    assert "(default: logs)" in text and "(default: <log-folder>/tensorboard)" in text
    assert "examples:" in text and "python train.py --algo tpo --env TokenReversal" in text
    assert all(name in text for name in registry.ALGOS)
    assert "TPO/TokenReversal-v0" in text and "TPO/MNISTBandit-v0" in text
