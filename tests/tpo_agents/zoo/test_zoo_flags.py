"""train.py's RL Zoo flags: -uuid, -yaml, --trial-id with --optimization-log-path, --track (W&B, offline),
and --save-freq's checkpoints saved with the mode of the other files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch
import yaml

from tests.tpo_agents.zoo.test_zoo_optimize import TINY, search
from tests.tpo_agents.zoo.test_zoo_validation import (
    ENV_DIR,
    TINY_GROUP,
    TINY_RUN,
    TINY_TOKENS,
    error_line,
    zoo_argv,
)
from tpo_agents.zoo import results
from tpo_agents.zoo.train import train

torch.set_num_threads(1)


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
