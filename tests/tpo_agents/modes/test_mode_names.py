"""The ``exact`` collection mode was called ``population``: the old name still works wherever a user wrote
it (the constructor, ``make_mode``, a zoo YAML or ``-params`` override, an Optuna search, ``load``'s
keyword arguments) with one ``FutureWarning``, a zip saved under it loads silently, the experiments'
fingerprints (and so the committed seed files) are unchanged, and errors list the current names only."""

from __future__ import annotations

import json
import warnings
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch as th
import yaml

from experiments.definitions import get_experiment
from tpo_agents import GRPO, TPO
from tpo_agents.checks import HyperparameterError
from tpo_agents.modes import MODES, OLD_MODE_NAMES, ExactMode, canonical_mode_name, make_mode
from tpo_agents.zoo.optimize import Objective, check_options
from tpo_agents.zoo.samplers import SAMPLERS
from tpo_agents.zoo.train import configure, train

th.set_num_threads(1)

MULTI = "TPO/MultiContextBandit-v0"
CONTEXTS = {"n_contexts": 5, "n_arms": 4}
SMALL = dict(env_kwargs=CONTEXTS, learning_rate=0.1, n_epochs=1, seed=0, device="cpu")
MESSAGE = 'group_mode="population" is now "exact"'


def mode_warnings(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    """The caught warnings about a mode's former name."""
    return [w for w in caught if issubclass(w.category, FutureWarning) and "group_mode=" in str(w.message)]


def test_the_old_name_maps_to_the_new_one():
    assert OLD_MODE_NAMES == {"population": "exact"} and "population" not in MODES
    assert MODES["exact"] is ExactMode and ExactMode.name == "exact"
    assert canonical_mode_name("population") == "exact"
    assert [canonical_mode_name(name) for name in ("exact", "token", "bogus", None)] == ["exact", "token",
                                                                                            "bogus", None]


@pytest.mark.parametrize("algo", [TPO, GRPO])
def test_the_constructor_takes_the_old_name_with_one_future_warning(algo):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = algo("TabularPolicy", MULTI, group_mode="population", **SMALL)
    (warning,) = mode_warnings(caught)
    assert MESSAGE in str(warning.message)
    assert warning.filename == __file__  # it points at the user's line, not into the package
    assert model.group_mode == "exact" and isinstance(model.mode, ExactMode)
    model.learn(n_iterations=1)


def test_the_old_name_trains_exactly_as_the_new_one():
    with pytest.warns(FutureWarning, match=MESSAGE):
        old = TPO("TabularPolicy", MULTI, group_mode="population", **SMALL)
    new = TPO("TabularPolicy", MULTI, group_mode="exact", **SMALL)
    for model in (old, new):
        model.learn(n_iterations=2)
    np.testing.assert_array_equal(old.policy.all_log_probs().detach().numpy(),
                                  new.policy.all_log_probs().detach().numpy())


def test_make_mode_takes_the_old_name():
    mode = make_mode("population", batch_size=4, group_size=1, match="prompts", baseline="batch_mean",
                     observation_space=None)
    assert isinstance(mode, ExactMode)


def test_an_unknown_name_lists_the_new_names_only():
    with pytest.raises(ValueError, match=r"unknown group_mode 'bogus'") as error:
        make_mode("bogus", batch_size=4, group_size=1, match="prompts", baseline="batch_mean",
                  observation_space=None)
    assert "'exact'" in str(error.value) and "population" not in str(error.value)
    with pytest.raises(HyperparameterError) as error:
        TPO("TabularPolicy", MULTI, group_mode="bogus", **SMALL)
    assert "'exact'" in str(error.value) and "population" not in str(error.value)


# ------------------------------------------------------------------------------------- saved zips
def rewrite_saved_mode(path: Path, group_mode: str) -> None:
    """Rewrite the ``group_mode`` stored in the ``data`` of the zip at ``path`` (as an older version
    saved it), keeping every other file of the zip."""
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(files["data"])
    data["group_mode"] = group_mode
    files["data"] = json.dumps(data, indent=4).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)


def test_a_zip_saved_with_the_old_name_loads_silently(tmp_path):
    model = TPO("TabularPolicy", MULTI, group_mode="exact", **SMALL)
    model.learn(n_iterations=1)
    model.save(tmp_path / "old")
    rewrite_saved_mode(tmp_path / "old.zip", "population")
    with zipfile.ZipFile(tmp_path / "old.zip") as archive:
        assert json.loads(archive.read("data"))["group_mode"] == "population"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = TPO.load(tmp_path / "old", env=MULTI, env_kwargs=CONTEXTS, device="cpu")
    assert not mode_warnings(caught)
    assert loaded.group_mode == "exact" and isinstance(loaded.mode, ExactMode)
    np.testing.assert_array_equal(loaded.policy.all_log_probs().detach().numpy(),
                                  model.policy.all_log_probs().detach().numpy())
    loaded.learn(n_iterations=1)
    # and keyword arguments given to load under the old name are taken, with the warning
    with pytest.warns(FutureWarning, match=MESSAGE):
        again = TPO.load(tmp_path / "old", device="cpu", group_mode="population")
    assert again.group_mode == "exact"


# ----------------------------------------------------------------------------------------------- zoo
def zoo(tmp_path: Path, *argv: str) -> object:
    """A tiny TPO run of the zoo on the multi-context bandit (5 contexts: 5 steps per update)."""
    base = ["--algo", "tpo", "--env", "MultiContextBandit", "-f", str(tmp_path / "logs"), "--seed", "0",
            "--verbose", "0", "--eval-freq", "-1", "-n", "10", "--env-kwargs", "n_contexts:5", "n_arms:4"]
    return train([*base, *argv])


def test_a_params_override_with_the_old_name_trains(tmp_path):
    with pytest.warns(FutureWarning, match=MESSAGE):
        result = zoo(tmp_path, "-params", "group_mode:population")
    assert result.model.group_mode == "exact" and isinstance(result.model.mode, ExactMode)


def test_a_yaml_entry_with_the_old_name_trains(tmp_path):
    entry = {"policy": "TabularPolicy", "learning_rate": 0.1, "batch_size": 100, "n_epochs": 1,
             "group_mode": "population", "n_timesteps": 10}
    file = tmp_path / "old.yml"
    file.write_text(yaml.safe_dump({MULTI: entry}))
    with pytest.warns(FutureWarning, match=MESSAGE):
        result = zoo(tmp_path, "-conf", str(file))
    assert result.model.group_mode == "exact"


def test_a_search_reads_the_old_name_as_the_new_one(tmp_path):
    argv = ["--algo", "tpo", "--env", "MultiContextBandit", "-f", str(tmp_path), "--seed", "0", "--verbose",
            "0", "-optimize", "-n", "10", "-params", "group_mode:population"]
    setup = configure(argv)
    objective = Objective(setup, check_options(setup))
    assert objective.context.group_mode == "exact"
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    params = SAMPLERS["tpo"](study.ask(), objective.context)
    assert "batch_size" not in params and "group_size" not in params  # exact mode: every context, no K


# ------------------------------------------------------------------------------------- fingerprints
#: Fingerprints of the committed seed files (``results/paper``), computed before the rename.
PINNED_FINGERPRINTS = {
    ("tabular_multi", "N100_K10", "tpo"): "9e4bf22b4ba894d3",
    ("tabular_multi", "N100_K10", "ce"): "a974d8da8f75a664",
    ("tabular_single", "K100", "tpo"): "c4f7f935300da2ae",
    ("mnist", "B100", "ce"): "2499f2733d9e0fd7",
}


@pytest.mark.parametrize("key", list(PINNED_FINGERPRINTS))
def test_the_experiments_fingerprints_are_unchanged(key):
    name, variant, algo = key
    experiment = get_experiment(name)
    spec = experiment.build(experiment.full.updates, False)[variant][algo]
    assert spec.fingerprint() == PINNED_FINGERPRINTS[key]


def test_a_spec_hashes_as_under_the_old_name():
    spec = get_experiment("tabular_multi").build(10, True)["N100_K10"]["grpo"]
    assert spec.kwargs["group_mode"] == "exact"
    old = replace(spec, kwargs={**spec.kwargs, "group_mode": "population"})
    assert old.fingerprint() == spec.fingerprint()
    other = replace(spec, kwargs={**spec.kwargs, "group_mode": "single"})
    assert other.fingerprint() != spec.fingerprint()
