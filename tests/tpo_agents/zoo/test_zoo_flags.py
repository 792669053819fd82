"""RL Zoo habits of train.py: -uuid, -yaml, --trial-id, --optimization-log-path, --track (W&B, offline),
the mode of saved zips, and bad input refused in one line before any file is written."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch
import yaml

from tests.tpo_agents.zoo.test_zoo_optimize import TINY, search
from tests.tpo_agents.zoo.test_zoo_validation import TINY_GROUP, TINY_TOKENS, error_line, zoo_argv
from tpo_agents.tpo import TPO
from tpo_agents.zoo import results
from tpo_agents.zoo.train import main, train

torch.set_num_threads(1)

ENV_DIR = "TPO-TokenReversal-v0"
TINY_RUN = ["-n", "24", "--env-kwargs", *TINY_TOKENS, "-params", *TINY_GROUP]


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def test_uuid_makes_a_unique_run_folder_that_the_plots_find(tmp_path: Path) -> None:
    """As in rl_zoo3, the number is the latest plain run's plus one and the uuid makes the name unique
    (concurrent runs of a sweep); the plots read every such run."""
    first = train(zoo_argv(tmp_path, "tpo", *TINY_RUN, "-uuid"))
    second = train(zoo_argv(tmp_path, "tpo", *TINY_RUN, "-uuid", "--seed", "1"))
    names = [os.path.basename(result.save_path) for result in (first, second)]
    assert names[0] != names[1]
    for name, result in zip(names, (first, second), strict=True):
        assert name.startswith(f"{ENV_DIR}_1_") and len(name) == len(f"{ENV_DIR}_1_") + 36
        assert os.path.isfile(os.path.join(result.save_path, f"{ENV_DIR}.zip"))
    found = results.find_runs(str(tmp_path / "logs"), ["tpo"])
    assert sorted(os.path.basename(run.path) for run in found) == sorted(names)


def test_yaml_file_gives_hyperparameters(tmp_path: Path) -> None:
    custom = tmp_path / "custom.yml"
    entry = {"policy": "TransformerPolicy", "group_mode": "token", "eta": 0.25, "n_timesteps": 24}
    custom.write_text(yaml.safe_dump({"TPO/TokenReversal-v0": entry}))
    result = train(zoo_argv(tmp_path, "tpo", "-yaml", str(custom), "--env-kwargs", *TINY_TOKENS,
                            "-params", *TINY_GROUP))  # fmt: skip
    assert result.model.eta == 0.25 and result.n_timesteps == 24
    assert result.hyperparams["eta"] == 0.25


def test_saved_zips_have_the_mode_of_the_other_files(tmp_path: Path) -> None:
    result = train(zoo_argv(tmp_path, "tpo", *TINY_RUN, "--save-freq", "12"))
    folder = Path(result.save_path)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*") if p.is_file()}
    assert f"{ENV_DIR}.zip" in modes and any(name.startswith("rl_model_") for name in modes)
    assert len(set(modes.values())) == 1, modes
    assert modes[f"{ENV_DIR}.zip"] & stat.S_IROTH


@pytest.mark.slow
def test_trial_id_trains_with_a_trials_hyperparameters(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.log")
    study = search(tmp_path, "--n-trials", "2", "--storage", storage, "--sampler", "random",
                   "--no-optim-plots", "--optimization-log-path", str(tmp_path / "trials"), *TINY).study
    drawn = study.trials[1].user_attrs["hyperparams"]
    assert drawn and (tmp_path / "trials" / "trial_1" / "evaluations.npz").is_file()
    assert (tmp_path / "trials" / "trial_0" / "best_model.zip").is_file()
    result = train(zoo_argv(tmp_path, "tpo", *TINY_RUN, "--storage", storage, "--trial-id", "1"))
    config = yaml.safe_load((Path(result.save_path) / ENV_DIR / "config.yml").read_text())
    for key, value in drawn.items():
        if key not in ("batch_size", "group_size"):  # held fixed by the search's -params
            assert config[key] == pytest.approx(value), key
    assert "--trial-id 9: study 'tpo_TPO-TokenReversal-v0' has no such trial (trials: 0..1)" in error_line(
        zoo_argv(tmp_path / "other", "tpo", *TINY_RUN, "--storage", storage, "--trial-id", "9"))
    assert not (tmp_path / "other").exists()


@pytest.mark.slow
def test_track_writes_an_offline_wandb_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = train(zoo_argv(tmp_path, "tpo", *TINY_RUN, "--track", "--wandb-project-name", "tests",
                            "-tags", "a", "b"))  # fmt: skip
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
    tensorboard = list((tmp_path / "runs").rglob("events.out.tfevents.*"))  # runs/<run name>/<Env>/TPO_1
    assert len(tensorboard) == 1 and str(tensorboard[0].relative_to(tmp_path)).startswith(
        "runs/TPO/TokenReversal-v0__tpo__0__")
    assert os.path.isfile(os.path.join(result.save_path, f"{ENV_DIR}.zip"))


# ------------------------------------------------------------- bad input: one line, exit != 0, no files
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
