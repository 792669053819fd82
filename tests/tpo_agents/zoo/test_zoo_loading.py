"""Which model the zoo's readers load: ``--model <run folder>`` with ``--load-best``, ``--load-checkpoint N``
and ``--load-last-checkpoint`` (``tpo_agents.evaluate`` and ``tpo_agents.enjoy``), a run without a final model
(pointed at its checkpoints; temporary files of a save cut short ignored), and ``load`` refusing a zip
that another algorithm saved."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from stable_baselines3 import PPO as SB3PPO

import tpo_agents
from tests.tpo_agents.zoo.test_zoo_validation import TINY_GROUP, TINY_TOKENS
from tpo_agents import DG, GRPO, PPO, TPO, GroupPG, saving
from tpo_agents.zoo import enjoy
from tpo_agents.zoo.evaluate import main
from tpo_agents.zoo.hyperparams import ConfigError
from tpo_agents.zoo.train import train

torch.set_num_threads(1)

ENV_DIR = "TPO-TokenReversal-v0"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny TPO run (12 env steps per update) with checkpoints at 24 and 48 steps and a best model."""
    logs = tmp_path_factory.mktemp("loading") / "logs"
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(logs), "--seed", "0", "--verbose", "0"]
    argv += ["-n", "48", "--save-freq", "24", "--eval-freq", "24", "--eval-episodes", "2", "-tb", ""]
    return Path(train([*argv, "--env-kwargs", *TINY_TOKENS, "-params", *TINY_GROUP]).save_path)


@pytest.mark.parametrize(("flags", "name"), [
    ([], f"{ENV_DIR}.zip"),
    (["--load-best"], "best_model.zip"),
    (["--load-checkpoint", "24"], "rl_model_24_steps.zip"),
    (["--load-last-checkpoint"], "rl_model_48_steps.zip"),
])  # fmt: skip
def test_a_run_folder_honours_the_load_flags(run: Path, flags: list[str], name: str) -> None:
    assert main(["--model", str(run), "-n", "2", *flags])["model"] == str(run / name)
    watched = enjoy.main(["--model", str(run), "-n", "3", "--no-render", "--verbose", "0", *flags])
    assert watched["model"] == str(run / name)


def test_a_load_flag_with_a_zip_is_refused(run: Path) -> None:
    zip_path = run / f"{ENV_DIR}.zip"
    with pytest.raises(ConfigError) as err:
        main(["--model", str(zip_path), "--load-best"])
    assert str(err.value) == (f"--load-best picks a model of a run folder, but --model names the zip "
                              f"{zip_path}: pass --model <its run folder>, or drop --load-best")


def test_a_missing_model_points_at_the_run_s_models(run: Path) -> None:
    with pytest.raises(ConfigError) as err:
        main(["--model", str(run), "--load-checkpoint", "30"])
    assert str(err.value) == (f"No rl_model_30_steps.zip in {run}: it holds {ENV_DIR}.zip (the final model: "
                              "no --load-* flag); best_model.zip (--load-best); checkpoints at 24, 48 steps "
                              "(--load-checkpoint N, --load-last-checkpoint)")


def test_a_run_killed_while_saving_is_pointed_at_its_checkpoints(run: Path) -> None:
    """kill -9 during the final save: no final model, a 0-byte temporary zip that every reader ignores."""
    killed = run.parent / f"{ENV_DIR}_2"  # the latest run of the log folder
    shutil.copytree(run, killed)
    (killed / f"{ENV_DIR}.zip").unlink()
    (killed / ".tmp-k1ll3d.zip").write_bytes(b"")
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(run.parent.parent), "-n", "2"]
    with pytest.raises(ConfigError) as err:
        main(argv)
    assert str(err.value) == (f"No {ENV_DIR}.zip in {killed}: it holds best_model.zip (--load-best); "
                              "checkpoints at 24, 48 steps (--load-checkpoint N, --load-last-checkpoint) "
                              "(.tmp-k1ll3d.zip: a save cut short, ignored)")
    assert main([*argv, "--load-last-checkpoint"])["model"] == str(killed / "rl_model_48_steps.zip")


def without_class(source: Path, target: Path) -> Path:
    """A copy of an SB3 zip without its ``algorithm_class`` attribute, as zips saved before it was kept."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            content = old.read(item.filename)
            if item.filename == "data":
                data = json.loads(content)
                data.pop("algorithm_class")
                content = json.dumps(data).encode()
            new.writestr(item, content)
    return target


def test_load_refuses_a_zip_of_another_algorithm(run: Path, tmp_path: Path) -> None:
    zip_path = run / f"{ENV_DIR}.zip"
    assert TPO.load(zip_path).num_timesteps == 48
    for other in (GRPO, DG, PPO):
        with pytest.raises(ValueError) as err:
            other.load(zip_path)
        assert str(err.value) == (f"cannot load {zip_path} as {other.__name__}: it was saved by TPO; load it "
                                  "with TPO.load")
    group_pg = tmp_path / "group_pg.zip"
    GroupPG("TabularPolicy", "TPO/KArmedBandit-v0", env_kwargs={"n_arms": 4}, batch_size=4).save(group_pg)
    with pytest.raises(ValueError, match="as DG: it was saved by GroupPG; load it with GroupPG.load"):
        DG.load(group_pg)  # the same hyperparameters: told apart by the recorded class
    older = without_class(zip_path, tmp_path / "older.zip")  # no recorded class: told by hyperparameters
    for other, holds in ((GRPO, "beta, clip_range, mask_zero_variance"), (DG, "eta"), (PPO, "clip_range")):
        with pytest.raises(ValueError) as err:
            other.load(older)
        assert str(err.value) == (f"cannot load {older} as {other.__name__}: it was saved by TPO (it "
                                  "holds anchor, eta of the grouped algorithms' own hyperparameters; a "
                                  f"{other.__name__} zip holds {holds})")
    with pytest.raises(ValueError, match="as TPO: it was saved by DG or GroupPG"):
        TPO.load(without_class(group_pg, tmp_path / "older_group_pg.zip"))
    sb3_zip = tmp_path / "sb3_ppo.zip"
    SB3PPO("MlpPolicy", "CartPole-v1", n_steps=8, batch_size=8).save(sb3_zip)
    with pytest.raises(ValueError, match="as TPO: it was saved by an algorithm that is not a grouped"):
        TPO.load(sb3_zip)
    with pytest.raises(ConfigError, match=f"^cannot load {zip_path} as GRPO: it was saved by TPO;"):
        main(["--algo", "grpo", "--model", str(zip_path), "-n", "2"])


def test_the_saving_registry_names_every_grouped_algorithm() -> None:
    """``load`` tells apart the zips of just the package's algorithms (``tpo_agents.saving.ALGORITHMS``)."""
    classes = saving.algorithm_classes()
    assert [klass.__name__ for klass in classes] == tpo_agents.__all__
    assert classes == [getattr(tpo_agents, name) for name in tpo_agents.__all__]
