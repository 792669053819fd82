"""Tests of the zoo (``train.py`` / ``tpo_agents.zoo``): the flagship command, config precedence,
run folder and TensorBoard output, resuming, interruption, errors, and every zoo_configs entry."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from stable_baselines3.common.callbacks import BaseCallback

from tests.tpo_agents.zoo.test_zoo_sb3 import TINY_EXTERNAL
from tpo_agents.zoo import registry
from tpo_agents.zoo.callbacks import atomic_save
from tpo_agents.zoo.hyperparams import ConfigError
from tpo_agents.zoo.results import read_monitor
from tpo_agents.zoo.train import configure, train
from tpo_gym import MULTITURN_ENV_IDS

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "zoo_configs"
ENV_DIR = "TPO-TokenReversal-v0"
#: Tiny sizes for SB3's PPO (n_envs * n_steps = 16 steps per update).
TINY_SB3 = ["n_envs:2", "n_steps:8", "batch_size:16", "n_epochs:1"]
#: Tiny sizes for the grouped algorithms: B = 4 contexts, K = 2.
TINY_GROUP = ["batch_size:4", "group_size:2"]
TINY_ENV = {"token": ["sequence_length:3"], "bandit": ["n_arms:4"], "multi": ["n_contexts:5", "n_arms:4"]}


def zoo(tmp_path: Path, *argv: str, algo: str = "sb3_ppo", env: str = "TokenReversal"):
    """``train()`` into ``tmp_path/logs`` with a fixed seed, no evaluation, quiet."""
    base = ["--algo", algo, "--env", env, "-f", str(tmp_path / "logs"), "--seed", "0", "--verbose", "0"]
    return train([*base, "--eval-freq", "-1", *argv])


def tb_tags(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every summary tag in the event files under ``folder`` -> [(step, value)] (value nan if not scalar)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    tags: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(str(folder / "**" / "events.out.tfevents*"), recursive=True)):
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                floats = value.tensor.float_val if kind == "tensor" else []
                scalar = floats[0] if floats else float("nan")
                scalar = value.simple_value if kind == "simple_value" else scalar
                tags.setdefault(value.tag, []).append((event.step, scalar))
    return tags


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


# ---------------------------------------------------------------------------------- flagship command
@pytest.mark.slow
@pytest.mark.parametrize("algo", ["tpo", "sb3_ppo"])
def test_exact_command(tmp_path: Path, algo: str) -> None:
    """``python train.py --algo tpo --env TokenReversal --hyperparams zoo_configs/`` with a tiny -n."""
    cmd = [
        sys.executable,
        "train.py",
        "--algo",
        algo,
        "--env",
        "TokenReversal",
        "--hyperparams",
        "zoo_configs/",
    ]
    cmd += ["-n", "1", "-f", str(tmp_path / "logs"), "-tb", str(tmp_path / "tb")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "TPO/TokenReversal-v0" in out.stdout  # the resolved id is printed
    run = tmp_path / "logs" / algo / f"{ENV_DIR}_1"
    for name in (f"{ENV_DIR}.zip", f"{ENV_DIR}/config.yml", f"{ENV_DIR}/args.yml", f"{ENV_DIR}/command.txt"):
        assert (run / name).is_file(), name
    (monitor,) = glob.glob(str(run / "*monitor.csv"))
    rows = Path(monitor).read_text().splitlines()
    assert '"env_id": "TPO/TokenReversal-v0"' in rows[0] and rows[1].startswith("r,l,t")
    assert len(rows) > 2, "one row per finished episode"
    model = registry.get_algo(algo).load(run / f"{ENV_DIR}.zip", device="cpu")
    assert model.num_timesteps >= 1
    args = yaml.safe_load((run / ENV_DIR / "args.yml").read_text())
    assert args["env"] == "TPO/TokenReversal-v0" and args["seed"] >= 0
    tb_run = tmp_path / "tb" / ENV_DIR / f"{algo.upper()}_1"
    tags = tb_tags(tb_run)
    assert "rollout/task_error" in tags
    assert all(0.0 <= v <= 1.0 for _, v in tags["rollout/task_error"])
    assert "_hparams_/experiment" in tags and "hyperparameters/text_summary" in tags


# ---------------------------------------------------------------------------------- precedence
def test_yaml_dir_is_read_and_is_the_default(tmp_path: Path) -> None:
    """A directory means ``<dir>/<algo>.yml``; no --hyperparams at all means zoo_configs/."""
    setup = configure(
        ["--algo", "tpo", "--env", "TokenReversal", "--hyperparams", str(CONFIGS), "-f", str(tmp_path)]
    )
    flagship = yaml.safe_load((CONFIGS / "tpo.yml").read_text())["TPO/TokenReversal-v0"]
    assert setup.values == flagship
    assert setup.n_timesteps == 1_000_000 and setup.env_kwargs["vocab_size"] == 2
    default = configure(["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path)])
    assert default.values == flagship
    conf = configure(["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path), "-conf", str(CONFIGS)])
    assert conf.values == flagship


def test_yaml_file_beats_yaml_dir(tmp_path: Path) -> None:
    file = write(
        tmp_path / "mine.yml",
        {"TPO/TokenReversal-v0": {"learning_rate": 0.5, "env_kwargs": {"vocab_size": 4}}},
    )
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path)]
    for sources in ([str(file), str(CONFIGS)], [str(CONFIGS), str(file)]):  # order does not matter
        setup = configure([*argv, "--hyperparams", *sources])
        assert setup.values["learning_rate"] == 0.5  # from the file
        assert setup.values["group_size"] == 8  # from the directory, untouched
        assert setup.env_kwargs == {"reward": "bag_of_tokens", "sequence_length": 10, "vocab_size": 4}


def test_overrides_beat_yaml_file(tmp_path: Path) -> None:
    file = write(tmp_path / "mine.yml", {"TPO/TokenReversal-v0": {"learning_rate": 0.5, "n_timesteps": 100}})
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path), "--hyperparams"]
    setup = configure([*argv, "learning_rate:0.25", "group_mode:sequence", str(file), str(CONFIGS)])
    assert setup.values["learning_rate"] == 0.25 and setup.values["group_mode"] == "sequence"
    assert setup.n_timesteps == 100
    # -conf and -params mix: overrides still win over the file given with -conf, which layers over
    # zoo_configs/ (the directory of a run given no other).
    setup = configure([*argv, "learning_rate:0.25", "-conf", str(file)])
    assert setup.values["learning_rate"] == 0.25 and setup.origins["n_timesteps"] == str(file)
    assert setup.values["group_size"] == 8 and setup.origins["group_size"].endswith("zoo_configs/tpo.yml")


def test_explicit_flags_beat_overrides(tmp_path: Path) -> None:
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path)]
    setup = configure(
        [
            *argv,
            "-params",
            "n_timesteps:500",
            "env_kwargs:dict(vocab_size=4)",
            "-n",
            "300",
            "--env-kwargs",
            "vocab_size:3",
        ]
    )
    assert setup.n_timesteps == 300
    assert setup.env_kwargs["vocab_size"] == 3 and setup.env_kwargs["reward"] == "bag_of_tokens"
    assert setup.values["n_timesteps"] == 300  # config.yml records what runs: the -n value
    assert setup.values["env_kwargs"] == setup.env_kwargs  # and the merged env kwargs


def test_values_reach_the_model_and_the_env(tmp_path: Path) -> None:
    result = zoo(
        tmp_path, "-n", "16", "--env-kwargs", "vocab_size:3", "-params", *TINY_SB3, "learning_rate:0.01"
    )
    assert result.model.learning_rate == 0.01
    assert result.model.n_envs == 2 and result.model.num_timesteps == 16
    assert result.model.observation_space == gym.make("TPO/TokenReversal-v0", vocab_size=3).observation_space
    config = yaml.safe_load(Path(result.save_path, ENV_DIR, "config.yml").read_text())
    assert config["learning_rate"] == 0.01 and config["n_envs"] == 2


# ---------------------------------------------------------------------------------- run folder, seeds
def test_run_folders_count_up_and_seed_is_recorded(tmp_path: Path) -> None:
    first = zoo(tmp_path, "-n", "16", "-params", *TINY_SB3)
    second = train(
        ["--algo", "sb3_ppo", "--env", "TokenReversal", "-f", str(tmp_path / "logs"), "--seed", "-1"]
        + ["--verbose", "0", "--eval-freq", "-1", "-n", "16", "-params", *TINY_SB3]
    )
    assert first.save_path.endswith(f"{ENV_DIR}_1") and second.save_path.endswith(f"{ENV_DIR}_2")
    args = yaml.safe_load(Path(second.save_path, ENV_DIR, "args.yml").read_text())
    assert args["seed"] == second.seed >= 0


@pytest.mark.parametrize("algo", ["sb3_ppo", "tpo"])
def test_same_seed_same_curve(tmp_path: Path, algo: str) -> None:
    tiny = TINY_SB3 if algo == "sb3_ppo" else TINY_GROUP
    argv = ["-n", "48", "-tb", str(tmp_path / "tb"), "--env-kwargs", "sequence_length:3", "-params", *tiny]
    runs = [zoo(tmp_path, *argv, algo=algo) for _ in range(2)]
    params = [torch.nn.utils.parameters_to_vector(r.model.policy.parameters()) for r in runs]
    assert torch.equal(params[0], params[1])
    curves = [
        tb_tags(tmp_path / "tb" / ENV_DIR / f"{algo.upper()}_{k}")["rollout/task_error"] for k in (1, 2)
    ]
    assert len(curves[0]) >= 2 and curves[0] == curves[1]


def test_eval_checkpoints_progress_and_hparams(tmp_path: Path) -> None:
    result = train(
        ["--algo", "sb3_ppo", "--env", "TokenReversal", "-f", str(tmp_path / "logs"), "--seed", "0"]
        + ["--verbose", "0", "-n", "64", "--eval-freq", "32", "--eval-episodes", "3", "--save-freq", "32"]
        + ["-tb", str(tmp_path / "tb"), "-P", "-params", *TINY_SB3]
    )
    run = Path(result.save_path)
    assert {p.name for p in run.glob("rl_model_*_steps.zip")} == {
        "rl_model_32_steps.zip",
        "rl_model_64_steps.zip",
    }
    evaluations = np.load(run / "evaluations.npz")
    assert list(evaluations["timesteps"]) == [32, 64] and evaluations["task_errors"].shape == (2, 3)
    assert (run / "best_model.zip").is_file()
    tags = tb_tags(tmp_path / "tb" / ENV_DIR / "SB3_PPO_1")
    assert {"eval/task_error", "eval/mean_reward", "rollout/task_error", "_hparams_/experiment"} <= set(tags)
    assert not list(run.glob(".tmp-*"))


# ---------------------------------------------------------------------------------- resume, interrupt
@pytest.mark.parametrize("algo", ["sb3_ppo", "tpo"])
def test_continue_training_keeps_step_counter(tmp_path: Path, algo: str) -> None:
    tiny = [*TINY_SB3] if algo == "sb3_ppo" else [*TINY_GROUP]
    extra = ["-tb", str(tmp_path / "tb"), "--env-kwargs", "sequence_length:3"]
    first = zoo(tmp_path, "-n", "16", *extra, "-params", *tiny, algo=algo)
    steps = first.model.num_timesteps
    zip_path = os.path.join(first.save_path, f"{ENV_DIR}.zip")
    second = zoo(tmp_path, "-n", "16", "-i", zip_path, *extra, "-params", *tiny, algo=algo)
    assert second.model.num_timesteps >= steps + 16
    assert registry.get_algo(algo).load(os.path.join(second.save_path, f"{ENV_DIR}.zip")).num_timesteps == (
        second.model.num_timesteps
    )
    tb_runs = sorted(p.name for p in (tmp_path / "tb" / ENV_DIR).iterdir())
    assert tb_runs == [f"{algo.upper()}_1"]  # the same TensorBoard run continues
    steps_logged = [s for s, _ in tb_tags(tmp_path / "tb" / ENV_DIR)["rollout/task_error"]]
    assert max(steps_logged) > steps


def tb_steps(run: Path, tag: str = "rollout/task_error") -> list[int]:
    """The steps of ``tag`` in the TensorBoard run ``run`` as TensorBoard shows them (its
    ``EventAccumulator`` over the run's event files, restarts applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run))
    events.Reload()
    return [scalar.step for scalar in events.Scalars(tag)]


def tpo_seed(tmp_path: Path, seed: int, *argv: str):
    """A tiny TPO run (12 steps per update) of ``seed``, TensorBoard in ``tmp_path/tb``."""
    base = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path / "logs"), "--seed", str(seed)]
    return train([*base, "--verbose", "0", "--eval-freq", "-1", "-tb", str(tmp_path / "tb"),
                  "--env-kwargs", *TINY_ENV["token"], "-params", *TINY_GROUP, *argv])  # fmt: skip


@pytest.mark.slow
def test_a_resumed_run_continues_its_own_tensorboard_run(tmp_path: Path) -> None:
    """Seed 1 (TPO_1, 24 steps) and seed 2 (TPO_2, 36 steps), then ``-i`` of seed 1's zip: its steps
    continue TPO_1, which its args.yml names, and TPO_2 holds seed 2's steps only."""
    first = tpo_seed(tmp_path, 1, "-n", "24")
    tpo_seed(tmp_path, 2, "-n", "36")
    time.sleep(1)  # a run's event files are read in the order of their names, which start with the second
    resumed = tpo_seed(tmp_path, 1, "-n", "24", "-i", os.path.join(first.save_path, f"{ENV_DIR}.zip"))
    runs = tmp_path / "tb" / ENV_DIR
    assert sorted(p.name for p in runs.iterdir()) == ["TPO_1", "TPO_2"]
    assert tb_steps(runs / "TPO_1") == [12, 24, 36, 48] and tb_steps(runs / "TPO_2") == [12, 24, 36]
    for run in (first, resumed):
        recorded = yaml.safe_load(Path(run.save_path, ENV_DIR, "args.yml").read_text())
        assert recorded["tensorboard_run"] == str(runs.resolve() / "TPO_1")


@pytest.mark.slow
def test_a_run_resumed_from_a_checkpoint_replaces_the_later_points(tmp_path: Path) -> None:
    """``-i rl_model_12_steps.zip`` of a 36-step run continues its TensorBoard run from step 12: TensorBoard
    drops the source's points after it (a restart at step 13), so the curve is the resumed run's."""
    first = tpo_seed(tmp_path, 1, "-n", "36", "--save-freq", "12")
    time.sleep(1)  # a run's event files are read in the order of their names, which start with the second
    tpo_seed(tmp_path, 1, "-n", "12", "-i", os.path.join(first.save_path, "rl_model_12_steps.zip"))
    assert tb_steps(tmp_path / "tb" / ENV_DIR / "TPO_1") == [12, 24]


def test_a_resume_outside_the_source_tensorboard_root_starts_a_new_run(tmp_path: Path) -> None:
    """``-i`` with another ``-tb`` (or a zip outside a run folder) logs to a new run there."""
    first = tpo_seed(tmp_path, 1, "-n", "12")
    again = tpo_seed(tmp_path, 1, "-n", "12", "-i", os.path.join(first.save_path, f"{ENV_DIR}.zip"),
                     "-tb", str(tmp_path / "other"))  # fmt: skip
    recorded = yaml.safe_load(Path(again.save_path, ENV_DIR, "args.yml").read_text())
    assert recorded["tensorboard_run"] == str((tmp_path / "other" / ENV_DIR / "TPO_1").resolve())
    assert tb_steps(tmp_path / "other" / ENV_DIR / "TPO_1") == [24]


class InterruptAfter(BaseCallback):
    """Raise KeyboardInterrupt (as Ctrl-C would) once 32 steps are done (YAML ``callback`` key)."""

    def _on_step(self) -> bool:
        if self.num_timesteps >= 32:
            raise KeyboardInterrupt
        return True


def test_interrupt_saves_a_loadable_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Ctrl-C at step 32, the last step of the second rollout (16 steps each): the model, its zip and the
    message count the 16 steps trained on, not the 16 collected after them."""
    result = zoo(
        tmp_path, "-n", "1000", "--save-freq", "16",
        "-params", *TINY_SB3, "callback:tests.tpo_agents.zoo.test_zoo.InterruptAfter",
    )
    assert result.interrupted and result.model.num_timesteps == 16
    assert ("Interrupted after 16 steps: saving the model (the 16 steps of the batch in progress were "
            "collected but not trained on, and are not counted)") in capsys.readouterr().out
    run = Path(result.save_path)
    model = registry.get_algo("sb3_ppo").load(run / f"{ENV_DIR}.zip")
    assert model.num_timesteps == 16
    assert [p.name for p in run.glob("rl_model_*")] == ["rl_model_16_steps.zip"]  # 32 was never reached
    assert registry.get_algo("sb3_ppo").load(run / "rl_model_16_steps.zip").num_timesteps == 16
    assert not list(run.glob(".tmp-*"))


def test_interrupt_of_a_grouped_algorithm_counts_the_steps_trained(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """TPO, 12 env steps per update (B = 4 prompts of H = 3 tokens): Ctrl-C at step 32, in the third
    collection, saves the model of the 24 steps its two updates trained on."""
    result = zoo(tmp_path, "-n", "1000", "--env-kwargs", *TINY_ENV["token"], "-params", *TINY_GROUP,
                 "callback:tests.tpo_agents.zoo.test_zoo.InterruptAfter", algo="tpo")  # fmt: skip
    assert result.interrupted and result.model.num_timesteps == 24 and result.model._n_updates == 2 * 4
    assert ("Interrupted after 24 steps: saving the model (the 8 steps of the batch in progress were "
            "collected but not trained on, and are not counted)") in capsys.readouterr().out
    assert registry.get_algo("tpo").load(Path(result.save_path) / f"{ENV_DIR}.zip").num_timesteps == 24


class InterruptBeforeUpdate(BaseCallback):
    """Raise KeyboardInterrupt (as Ctrl-C would) once a collection of 36 steps ends, before its update."""

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.num_timesteps >= 36:
            raise KeyboardInterrupt


def test_interrupt_before_an_update_leaves_its_episodes_out_of_the_monitor(tmp_path: Path) -> None:
    """Ctrl-C after the third collection (steps 24-36), before its update: ``monitor.csv`` holds the
    episodes of the two updates, as many steps as the saved zip counts (24), not the 36 collected."""
    result = tpo_seed(tmp_path, 0, "-n", "1000", "-params", *TINY_GROUP,
                      "callback:tests.tpo_agents.zoo.test_zoo.InterruptBeforeUpdate")  # fmt: skip
    saved = registry.get_algo("tpo").load(Path(result.save_path) / f"{ENV_DIR}.zip")
    episodes = read_monitor(result.save_path)
    assert result.interrupted and saved.num_timesteps == int(episodes["l"].sum()) == 24
    assert saved._episode_num == len(episodes) == 8


def test_atomic_save_keeps_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    result = zoo(tmp_path, "-n", "16", "-params", *TINY_SB3)
    path = os.path.join(result.save_path, "checkpoint.zip")
    atomic_save(result.model, path)
    before = Path(path).read_bytes()
    model = result.model

    def broken_save(f, *args, **kwargs):
        f.write(b"partial zip")
        raise KeyboardInterrupt

    model.save = broken_save
    with pytest.raises(KeyboardInterrupt):
        atomic_save(model, path)
    assert Path(path).read_bytes() == before
    assert not list(Path(result.save_path).glob(".tmp-*"))


# ---------------------------------------------------------------------------------- errors
@pytest.mark.slow
def test_unknown_algo_lists_choices_and_nearest(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"Unknown algorithm 'tpp'.*Did you mean 'tpo'.*grpo"):
        configure(["--algo", "tpp", "--env", "TokenReversal", "-f", str(tmp_path)])
    out = subprocess.run(
        [sys.executable, "train.py", "--algo", "tpp"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode != 0 and "Did you mean 'tpo'" in out.stderr and "Traceback" not in out.stderr


def test_unknown_env_lists_choices_and_nearest(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"Unknown env 'TokenReversl'.*'TPO/TokenReversal-v0'.*TPO/TokenCopy-v0"
    ):
        configure(["--algo", "tpo", "--env", "TokenReversl", "-f", str(tmp_path)])


def test_short_names_resolve() -> None:
    import tpo_gym  # noqa: F401

    for name in (
        "TokenReversal",
        "tokenreversal",
        "TPO/TokenReversal",
        "TokenReversal-v0",
        "tpo_gym:TPO/TokenReversal-v0",
    ):
        assert registry.resolve_env_id(name) == "TPO/TokenReversal-v0"
    assert registry.resolve_env_id("CartPole") == "CartPole-v1"


def test_unknown_yaml_key_names_key_algo_and_file(tmp_path: Path) -> None:
    file = write(tmp_path / "bad.yml", {"TPO/TokenReversal-v0": {"n_timesteps": 10, "etaa": 1.0}})
    with pytest.raises(ConfigError, match=rf"'etaa' for algorithm 'tpo'.*{file}.*Did you mean 'eta'"):
        configure(["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path), "-params", str(file)])
    with pytest.raises(ConfigError, match=r"'lr'.*'sb3_ppo'.*--hyperparams override"):
        configure(["--algo", "sb3_ppo", "--env", "TokenReversal", "-f", str(tmp_path), "-params", "lr:0.1"])
    with pytest.raises(ConfigError, match=r"'seed'.*command-line flag"):
        configure(["--algo", "sb3_ppo", "--env", "TokenReversal", "-f", str(tmp_path), "-params", "seed:3"])


def test_missing_entry_falls_back_to_default_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    file = write(tmp_path / "d.yml", {"default": {"n_timesteps": 7, "policy": "MlpPolicy"}})
    setup = configure(
        ["--algo", "sb3_ppo", "--env", "TokenReversal", "-f", str(tmp_path), "-params", str(file)]
    )
    assert setup.n_timesteps == 7
    assert f"No entry for TPO/TokenReversal-v0 in {file}: using its 'default'" in capsys.readouterr().out
    nothing = write(tmp_path / "n.yml", {"TPO/TokenCopy-v0": {"n_timesteps": 7}})
    with pytest.raises(ConfigError, match=r"not found for sb3_ppo-TPO/TokenReversal-v0 in .*n.yml"):
        configure(
            ["--algo", "sb3_ppo", "--env", "TokenReversal", "-f", str(tmp_path), "-params", str(nothing)]
        )


FULL_ID = "must be the full env id: write 'TPO/TokenReversal-v0'."


@pytest.mark.parametrize(("key", "hint"), [
    ("TokenReversal", f"The key 'TokenReversal' {FULL_ID}"),
    ("TPO/TokenReversal", f"The key 'TPO/TokenReversal' {FULL_ID}"),
    ("TPO/TokenReversl-v0", "Did you mean 'TPO/TokenReversal-v0' for the key 'TPO/TokenReversl-v0'?"),
    ("TPO/TokenCopy-v0", ""),  # another env's entry: no hint
])  # fmt: skip
def test_a_key_that_is_not_the_full_env_id_names_the_id_to_write(tmp_path: Path, key: str, hint: str) -> None:
    file = write(tmp_path / "short.yml", {key: {"n_timesteps": 7}})
    with pytest.raises(ConfigError) as err:
        configure(["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path), "-params", str(file)])
    missing = f"Hyperparameters not found for tpo-TPO/TokenReversal-v0 in {file} (no such key, no 'default')."
    assert str(err.value) == f"{missing} {hint}".strip()


def test_broken_yaml_gives_file_and_line(tmp_path: Path) -> None:
    file = tmp_path / "broken.yml"
    file.write_text("TPO/TokenReversal-v0:\n  n_timesteps: 10\n  policy: [MlpPolicy\n")
    with pytest.raises(ConfigError, match=rf"{file}:4:1: invalid YAML.*line 3"):
        configure(["--algo", "sb3_ppo", "--env", "TokenReversal", "-f", str(tmp_path), "-params", str(file)])


def test_ablation_definition_is_kept(tmp_path: Path) -> None:
    file = write(tmp_path / "a.yml", {"default": {"n_timesteps": 7, "policy": "TransformerPolicy"}})
    argv = ["--algo", "tpo_no_anchor", "--env", "TokenReversal", "-f", str(tmp_path), "-params", str(file)]
    assert configure(argv).values["anchor"] is False  # set although the file does not say it
    with pytest.raises(
        ConfigError, match=r"'tpo_no_anchor' is defined by anchor=False.*override sets anchor=True"
    ):
        configure([*argv, "anchor:True"])


def test_missing_file_and_bad_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found: nowhere.yml"):
        configure(["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path), "-params", "nowhere.yml"])
    with pytest.raises(ConfigError, match="expected a directory"):
        configure(["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path), "-params", "oops"])


# ---------------------------------------------------------------------------------- every entry
def config_entries() -> list[tuple[str, str]]:
    """(algo, env key) for every entry of every zoo_configs/<algo>.yml."""
    entries = []
    for path in sorted(CONFIGS.glob("*.yml")):
        for key in yaml.safe_load(path.read_text()):
            entries.append((path.stem, key))
    return entries


def test_every_config_file_is_a_registered_algo() -> None:
    names = {algo for algo, _ in config_entries()}
    assert names == set(registry.ALGOS), names ^ set(registry.ALGOS)


@pytest.mark.parametrize(("algo", "key"), config_entries())
def test_every_entry_trains_a_few_steps(tmp_path: Path, algo: str, key: str, request) -> None:
    """Each env x algorithm entry of zoo_configs trains one tiny update (language models: on the tiny
    test model in place of the entry's model, with a few small items)."""
    sources = [str(CONFIGS)]
    env = key
    if key == "default":  # the default entry, on an env the file has no entry for
        data = yaml.safe_load((CONFIGS / f"{algo}.yml").read_text())
        sources = [str(write(tmp_path / f"{algo}.yml", {"default": data["default"]}))]
        tabular = data["default"]["policy"] == "TabularPolicy"
        env = "TPO/MultiContextBandit-v0" if tabular else "TPO/TokenReversal-v0"
    entry = yaml.safe_load((CONFIGS / f"{algo}.yml").read_text())[key]
    if algo in registry.EXTERNAL_ALGOS:  # SB3 / sb3-contrib: a few dozen steps per update
        tiny = list(TINY_EXTERNAL[algo])
    else:  # B = 4 (exact mode uses every context), K = 2 where the entry has a group
        tiny = ["batch_size:4"] + (["group_size:2"] if "group_size" in entry else [])
    kind = (
        "token"
        if "Token" in env
        else "multi"
        if "MultiContext" in env
        else "bandit"
        if "Bandit" in env
        else ""
    )
    env_kwargs = TINY_ENV.get(kind, []) if "MNIST" not in env else []
    if entry.get("policy") == "LLMPolicy":
        model_dir = request.getfixturevalue("tiny_llm_dir")
        tiny.append(f"policy_kwargs:dict(model={model_dir!r}, max_new_tokens=4, micro_batch_size=4)")
        env_kwargs = ["size:4", "eval_size:2"] if env not in MULTITURN_ENV_IDS else ["max_turns:2"]
        if env == "TPO/GSM8K-v0":  # read from a file, not generated: a tiny one
            rows = [{"question": f"{i} + 1?", "answer": f"#### {i + 1}"} for i in range(6)]
            (tmp_path / "gsm8k.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
            env_kwargs.append(f"data_file:{tmp_path / 'gsm8k.jsonl'}")
    argv = ["-n", "1", "--hyperparams", *sources, *tiny] + (
        ["--env-kwargs", *env_kwargs] if env_kwargs else []
    )
    result = zoo(tmp_path, *argv, algo=algo, env=env)
    assert result.model.num_timesteps >= 1
    assert Path(result.save_path, f"{registry.env_file_name(env)}.zip").is_file()
    for name, value in registry.ablation_kwargs(algo).items():
        assert getattr(result.model, name) == value


# ---------------------------------------------------------------------- the algorithm owns its env
@pytest.mark.slow
@pytest.mark.parametrize(
    "algo, override",
    [("dg", "normalize:True"), ("tpo", "n_envs:4"), ("ppo", "frame_stack:2"),
     ("grpo", "env_wrapper:'gymnasium.wrappers.RecordEpisodeStatistics'")],
)  # fmt: skip
def test_env_pipeline_keys_are_refused_for_grouped_algorithms(tmp_path: Path, algo: str, override: str):
    env = "MNISTBandit" if algo == "dg" else "TokenReversal"
    cmd = [sys.executable, str(ROOT / "train.py"), "--algo", algo, "--env", env, "-f", str(tmp_path / "logs"),
           "-params", override]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    key = override.split(":")[0]
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and key in out.stderr and repr(algo) in out.stderr
    assert not (tmp_path / "logs").exists()


def test_grouped_algorithm_on_another_env_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'CartPole-v1' is not one"):
        zoo(tmp_path, "-n", "10", algo="tpo", env="CartPole-v1")
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_clip_range_schedule_trains_and_is_logged(tmp_path: Path, algo: str) -> None:
    zoo(tmp_path, "-n", "36", "-tb", str(tmp_path / "tb"), "--env-kwargs", "sequence_length:3",
        "-params", *TINY_GROUP, "clip_range:lin_0.2", algo=algo)  # fmt: skip
    clip = [value for _, value in tb_tags(tmp_path / "tb")["train/clip_range"]]
    assert clip == pytest.approx([0.2 * (1 - k / 3) for k in (1, 2, 3)], abs=1e-6)
