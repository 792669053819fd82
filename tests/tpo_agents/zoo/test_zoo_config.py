"""The zoo's hyperparameters as the README states them: a YAML file given alone layers over zoo_configs/
(directory < file < key:value), errors name the file and the key with the value as written, policy_kwargs
errors are one line, a new reasoning-gym dataset from the command line drops the old one's keys, and a
callback that counts calls warns when ``learn`` never calls it often enough."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback

from tests.tpo_agents.zoo.test_zoo_validation import TINY_GROUP, TINY_TOKENS, error_line, zoo_argv
from tpo_agents import TPO
from tpo_agents.callback_steps import never_firing
from tpo_agents.zoo import hyperparams as hp
from tpo_agents.zoo.envs import make_env
from tpo_agents.zoo.train import configure, train

torch.set_num_threads(1)

ENV_ID = "TPO/TokenReversal-v0"
PROJECT_TPO = str(hp.PROJECT_CONFIGS / "tpo.yml")


@pytest.fixture(autouse=True)
def outside_the_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in ``tmp_path``: without ``./zoo_configs/``, the default directory is the project's own."""
    monkeypatch.chdir(tmp_path)


def yaml_file(tmp_path: Path, entry: dict, env_id: str = ENV_ID, name: str = "my.yml") -> str:
    """A config file holding ``entry`` for ``env_id``."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump({env_id: entry}))
    return str(path)


@pytest.mark.parametrize("flag", ["-params", "-conf", "-yaml"])
def test_a_file_alone_layers_over_zoo_configs(tmp_path: Path, flag: str) -> None:
    path = yaml_file(tmp_path, {"eta": 0.5, "env_kwargs": {"sequence_length": 3}})
    given = ["-params", path, "n_epochs:2"] if flag == "-params" else [flag, path, "-params", "n_epochs:2"]
    setup = configure(zoo_argv(tmp_path, "tpo", *given))
    assert setup.values["eta"] == 0.5 and setup.origins["eta"] == path
    assert setup.values["policy"] == "TransformerPolicy" and setup.origins["policy"] == PROJECT_TPO
    assert setup.values["n_epochs"] == 2 and setup.origins["n_epochs"] == "--hyperparams override"
    assert setup.env_kwargs == {"reward": "bag_of_tokens", "sequence_length": 3, "vocab_size": 2}


def test_a_file_alone_over_a_zoo_configs_without_the_algorithm(tmp_path: Path) -> None:
    """./zoo_configs/ without tpo.yml: the file alone gives every value."""
    (tmp_path / "zoo_configs").mkdir()
    path = yaml_file(tmp_path, {"policy": "TransformerPolicy", "n_timesteps": 24, "batch_size": 4})
    setup = configure(zoo_argv(tmp_path, "tpo", "-params", path))
    assert set(setup.origins.values()) == {path} and setup.values["batch_size"] == 4


@pytest.mark.parametrize(("entry", "line"), [
    ({"learning_rate": -1}, "learning_rate=-1 (in {path}): must be a number > 0 or a schedule"),
    ({"group_size": 0}, "group_size=0 (in {path}): must be an integer >= 2 in token mode"),
    ({"n_epochs": 0}, "n_epochs=0 (in {path}): must be an integer >= 1"),
    ({"learning_rate": "fast"}, "learning_rate='fast' (in {path}): must be a number > 0"),
    ({"batch_size": "100"}, "batch_size='100' (in {path}): must be an integer >= 1"),
])  # fmt: skip
def test_a_bad_value_in_a_file_alone_names_the_file_and_the_key(tmp_path: Path, entry: dict,
                                                                 line: str) -> None:
    path = yaml_file(tmp_path, entry)
    message = error_line(zoo_argv(tmp_path, "tpo", "-params", path, "-n", "24"))
    assert message.startswith("error: " + line.format(path=path)) and "\n" not in message
    assert not (tmp_path / "logs").exists()


def test_a_missing_policy_names_the_files_read(tmp_path: Path) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    yaml_file(folder, {"n_timesteps": 24}, name="tpo.yml")
    message = error_line(zoo_argv(tmp_path, "tpo", "-params", str(folder)))
    assert message == (f"error: No 'policy' for tpo on {ENV_ID}: none of {folder / 'tpo.yml'} sets it; "
                       "set policy in the YAML entry or pass -params policy:<value>")


@pytest.mark.parametrize(("value", "line"), [
    ("dict(d_model=-1)", "tpo: policy_kwargs='dict(d_model=-1)' (in --hyperparams override) does not "
                         "build the policy: RuntimeError: Trying to create tensor with negative dimension"),
    ("dict(colour=1)", "tpo: policy_kwargs='dict(colour=1)' (in --hyperparams override) does not build "
                       "the policy: TypeError: TransformerSoftmaxPolicy.__init__() got an unexpected"),
    ("dict(d_model=", "policy_kwargs='dict(d_model=' (in --hyperparams override): must be a dict, or a "
                      "Python expression of one"),
])  # fmt: skip
def test_policy_kwargs_errors_are_one_line(tmp_path: Path, value: str, line: str) -> None:
    message = error_line(zoo_argv(tmp_path, "tpo", "-n", "24", "-params", f"policy_kwargs:{value!r}"))
    assert message.startswith(f"error: {line}") and "\n" not in message
    assert not (tmp_path / "logs").exists()


# ------------------------------------------------------------------- switching the reasoning-gym dataset
RG = ["--env", "ReasoningGym", "-n", "16", "--eval-freq", "-1", "-tb", "", "--verbose", "1"]
SMALL = ["size:4", "eval_size:2"]


@pytest.mark.parametrize("how", ["--env-kwargs", "override", "file"])
def test_a_new_dataset_drops_the_old_one_s_keys(tmp_path: Path, how: str,
                                                capsys: pytest.CaptureFixture) -> None:
    """zoo_configs/tpo.yml counts letters (min_words, max_words); basic_arithmetic takes neither."""
    if how == "--env-kwargs":
        extra, origin = ["--env-kwargs", "dataset:basic_arithmetic", *SMALL], "--env-kwargs"
    elif how == "override":
        extra = ["-params", "env_kwargs:dict(dataset='basic_arithmetic', size=4, eval_size=2)"]
        origin = "--hyperparams override"
    else:
        entry = {"env_kwargs": {"dataset": "basic_arithmetic", "size": 4, "eval_size": 2}}
        origin = yaml_file(tmp_path, entry, "TPO/ReasoningGym-v0")
        extra = ["-params", origin]
    setup = configure(["--algo", "tpo", *RG, *extra])
    assert setup.env_kwargs == {"dataset": "basic_arithmetic", "reward": "binary", "size": 4, "eval_size": 2}
    assert setup.values["env_kwargs"] == setup.env_kwargs and setup.origins["env_kwargs"] == origin
    assert (f"Not using max_words, min_words of the env_kwargs of {PROJECT_TPO}: they configure dataset "
            f"'letter_counting', and {origin} switches it to 'basic_arithmetic'") in capsys.readouterr().out
    env = gym.make("TPO/ReasoningGym-v0", **setup.env_kwargs)  # the env builds (no language model needed)
    assert "Calculate" in env.reset(seed=0)[0]


def test_the_same_dataset_still_merges_key_by_key(tmp_path: Path) -> None:
    setup = configure(["--algo", "tpo", *RG, "--env-kwargs", "dataset:letter_counting", "max_words:2"])
    assert setup.env_kwargs == {"dataset": "letter_counting", "min_words": 1, "max_words": 2,
                                "reward": "binary"}
    kept = hp.merge_env_kwargs("TPO/ReasoningGym-v0", {"dataset": "a", "min_words": 1, "seed": 3},
                               {"dataset": "b", "max_terms": 2})
    assert kept == {"dataset": "b", "seed": 3, "max_terms": 2}  # the env's own seed stays
    token = hp.merge_env_kwargs(ENV_ID, {"sequence_length": 3}, {"dataset": "b"})
    assert token == {"sequence_length": 3, "dataset": "b"}  # an env that names every kwarg: a plain merge


# ------------------------------------------------------------------- callbacks that count calls
@pytest.mark.filterwarnings("ignore:Training and eval env are not of the same type")
def test_a_callback_that_can_never_fire_is_named(tmp_path: Path) -> None:
    """TPO in token mode makes one callback step per B = 4 env steps: learn(48) makes 12 of them."""
    model = TPO("TransformerPolicy", ENV_ID, env_kwargs={"sequence_length": 3}, batch_size=4, group_size=2,
                seed=0)
    eval_env = make_env(ENV_ID, 1, 0, {"sequence_length": 3})
    late, due = (EvalCallback(eval_env, eval_freq=freq, n_eval_episodes=1, verbose=0) for freq in (50, 12))
    assert never_firing(model, [late, due], 48) == [
        "EvalCallback(eval_freq=50) never fires: it counts callback steps, and TPO makes one per 4 env "
        "steps, so learn(48) makes 12; use eval_freq <= 12, or "
        "tpo_agents.zoo.callbacks.EveryTimesteps(n_steps, callback) to count env steps"
    ]
    never = r"^EvalCallback\(eval_freq=50\) never fires: .* makes 12;"
    with pytest.warns(UserWarning, match=never) as caught:
        model.learn(48, callback=[late, due])  # learn() itself says so, in the zoo or not
    assert [w.filename for w in caught if "never fires" in str(w.message)] == [__file__]
    assert late.n_calls == due.n_calls == 12  # one call per 4 env steps
    assert late.best_mean_reward == -np.inf < due.best_mean_reward  # only the second evaluated
    eval_env.close()


def test_the_zoo_warns_of_a_yaml_callback_that_never_fires(tmp_path: Path) -> None:
    every_100 = {"save_freq": 100, "save_path": str(tmp_path / "ck")}
    checkpoint = {"stable_baselines3.common.callbacks.CheckpointCallback": every_100}
    path = yaml_file(tmp_path, {"callback": checkpoint})
    with pytest.warns(UserWarning, match=r"^CheckpointCallback\(save_freq=100\) never fires: .* makes 6;"):
        train(zoo_argv(tmp_path, "tpo", "-params", path, *TINY_GROUP, "-n", "24", "-tb", "",
                       "--env-kwargs", *TINY_TOKENS))
    assert not list((tmp_path / "ck").glob("*.zip"))  # it never saved
    assert not never_firing(TPO("TabularPolicy", "TPO/KArmedBandit-v0", batch_size=4),
                            CheckpointCallback(save_freq=1, save_path=str(tmp_path)), 4)
