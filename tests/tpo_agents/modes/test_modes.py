"""Collection modes as objects and the algorithm owning its env: which loss view each mode gives each
algorithm, env sizes, env building from an id, monitor rows, load with an env, exact update counts."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch as th
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.utils import LinearSchedule

import tpo_gym  # noqa: F401
from tpo_agents import CE, DG, GRPO, PG, PPO, TPO, GroupPG
from tpo_agents.modes import MODES, CollectionMode
from tpo_agents.policies import MlpPolicy, TabularPolicy, TransformerPolicy
from tpo_agents.policies.protocols import ActionPolicy, SequencePolicy

th.set_num_threads(1)

TOKENS = dict(sequence_length=3, vocab_size=2)
SMALL = dict(batch_size=4, group_size=2, seed=0, device="cpu")


def test_every_mode_is_a_collection_mode_offering_views():
    assert sorted(MODES) == ["exact", "multiturn", "sequence", "single", "text", "token"]
    for mode in MODES.values():
        assert issubclass(mode, CollectionMode) and mode.views


@pytest.mark.parametrize(
    "algo, modes",
    [
        (TPO, ("token", "sequence", "single", "exact", "text", "multiturn")),
        (GRPO, ("token", "sequence", "single", "exact", "text", "multiturn")),
        (GroupPG, ("token", "sequence", "single", "exact", "text", "multiturn")),
        (DG, ("single", "exact", "text", "multiturn")),
        (PG, ("single", "exact", "text", "multiturn")),
        (PPO, ("single", "text", "multiturn")),
        (CE, ("exact",)),
    ],
)
def test_supported_modes_follow_from_the_losses_an_algorithm_defines(algo, modes):
    assert algo.supported_modes() == modes


@pytest.mark.parametrize(
    "algo, mode, view",
    [(TPO, "single", "group"), (GRPO, "single", "sample"), (GRPO, "exact", "exact"),
     (TPO, "exact", "group"), (GRPO, "token", "group"), (GroupPG, "single", "sample")],
)  # fmt: skip
def test_the_mode_picks_its_first_view_the_algorithm_has(algo, mode, view):
    env = "TPO/MultiContextBandit-v0" if mode == "exact" else "TPO/KArmedBandit-v0"
    env = "TPO/TokenCopy-v0" if mode == "token" else env
    policy = "TransformerPolicy" if mode == "token" else "TabularPolicy"
    kwargs = TOKENS if mode == "token" else {}
    model = algo(policy, env, env_kwargs=kwargs, group_mode=mode, **SMALL)
    assert model._view == view


@pytest.mark.parametrize(
    "mode, match, n_envs",
    [("token", "prompts", 4), ("sequence", "prompts", 8), ("single", "prompts", 4),
     ("single", "interactions", 8)],
)  # fmt: skip
def test_the_algorithm_builds_exactly_the_env_its_mode_needs(mode, match, n_envs):
    algo = PPO if mode == "single" else TPO
    model = algo("TransformerPolicy", "TPO/TokenReversal-v0", env_kwargs=TOKENS, group_mode=mode, match=match,
                 **SMALL)  # fmt: skip
    assert model.n_envs == model.env.num_envs == model.mode.n_envs == n_envs
    assert model.observation_space.shape == (6,)  # 2H with the given H = 3


def test_exact_mode_enumerates_the_contexts_of_a_tabular_env():
    model = CE("TabularPolicy", "TPO/MultiContextBandit-v0", env_kwargs=dict(n_contexts=7, n_arms=3), **SMALL)
    assert model.n_envs == 7


def test_an_env_that_is_not_natively_batched_gets_a_clear_error():
    with pytest.raises(ValueError, match="'CartPole-v1' is not one: train other envs with an SB3 algorithm"):
        TPO("MlpPolicy", "CartPole-v1", **SMALL)


def test_bad_env_kwargs_name_the_env_and_the_kwargs():
    with pytest.raises(ValueError, match="cannot make TPO/TokenCopy-v0 with {'colour': 3}"):
        TPO("TransformerPolicy", "TPO/TokenCopy-v0", env_kwargs={"colour": 3}, **SMALL)


def test_policies_declare_the_protocols():
    model = TPO("TransformerPolicy", "TPO/TokenCopy-v0", env_kwargs=TOKENS, **SMALL)
    assert isinstance(model.policy, SequencePolicy) and isinstance(model.policy, TransformerPolicy)
    bandit = PG("TabularPolicy", "TPO/KArmedBandit-v0", **SMALL)
    assert isinstance(bandit.policy, ActionPolicy) and not isinstance(bandit.policy, SequencePolicy)
    assert isinstance(bandit.policy, TabularPolicy) and not isinstance(bandit.policy, MlpPolicy)


class _Rows(KVWriter):
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def write(self, key_values, key_excluded, step=0) -> None:
        self.rows.append(dict(key_values))


def test_learn_n_iterations_runs_exactly_that_many_updates():
    model = TPO("TransformerPolicy", "TPO/TokenCopy-v0", env_kwargs=TOKENS, n_epochs=2, **SMALL)
    rows = _Rows()
    model.set_logger(Logger(None, [rows]))
    model.learn(n_iterations=3)
    assert len(rows.rows) == 3 and model._n_updates == 6 and model.num_timesteps == 3 * 4 * 3
    model.learn(n_iterations=2, reset_num_timesteps=False)
    assert model._n_updates == 10 and model.num_timesteps == 5 * 4 * 3
    for bad in (dict(), dict(total_timesteps=10, n_iterations=1)):
        with pytest.raises(ValueError, match="exactly one"):
            model.learn(**bad)
    with pytest.raises(ValueError, match="n_iterations must be a positive integer, got 0"):
        model.learn(n_iterations=0)


def test_monitor_rows_are_written_once_per_episode(tmp_path: Path):
    model = TPO("TransformerPolicy", "TPO/TokenCopy-v0", env_kwargs=TOKENS, monitor_dir=str(tmp_path),
                **SMALL)  # fmt: skip
    model.learn(n_iterations=2)
    lines = (tmp_path / "monitor.csv").read_text().splitlines()
    assert json.loads(lines[0][1:])["env_id"] == "TPO/TokenCopy-v0"
    rows = list(csv.DictReader(lines[1:]))
    assert len(rows) == 2 * 4 and set(rows[0]) == {"r", "l", "t", "is_success", "token_error"}
    assert all(row["l"] == "3" for row in rows)


def test_clip_range_schedule_is_evaluated_and_logged():
    rows = _Rows()
    for algo, mode in ((GRPO, "token"), (PPO, "single")):
        model = algo("TransformerPolicy", "TPO/TokenCopy-v0", env_kwargs=TOKENS, group_mode=mode,
                     clip_range=LinearSchedule(0.2, 0.0, 1.0), **SMALL)  # fmt: skip
        model.set_logger(Logger(None, [rows]))
        model.learn(n_iterations=2)
    clip = [row["train/clip_range"] for row in rows.rows]
    assert clip == pytest.approx([0.1, 0.0, 0.1, 0.0])  # progress remaining 1/2, then 0
    assert all("train/clip_fraction" in row for row in rows.rows)


def test_load_without_env_predicts_and_with_an_id_builds_its_env(tmp_path: Path):
    model = TPO("TransformerPolicy", "TPO/TokenCopy-v0", env_kwargs=TOKENS, **SMALL)
    model.learn(n_iterations=1)
    model.save(tmp_path / "model")
    loaded = TPO.load(tmp_path / "model")
    assert loaded.env is None and loaded.env_kwargs == TOKENS
    loaded.predict(model.observation_space.sample())
    with pytest.raises(ValueError, match="no env"):
        loaded.learn(n_iterations=1)
    resumed = TPO.load(tmp_path / "model", env="TPO/TokenCopy-v0", env_kwargs=TOKENS)
    assert resumed.env.num_envs == 4
    resumed.learn(n_iterations=1, reset_num_timesteps=False)
    assert resumed.num_timesteps == 2 * 4 * 3
    with pytest.raises(ValueError, match="Observation spaces do not match"):
        TPO.load(tmp_path / "model", env="TPO/TokenCopy-v0", env_kwargs=dict(sequence_length=5))


def test_a_text_env_in_another_mode_names_the_mode_to_use():
    with pytest.raises(ValueError, match="for 'TPO/GraphColor-v0' use group_mode='text'"):
        TPO("TransformerPolicy", "TPO/GraphColor-v0", env_kwargs=dict(size=2, eval_size=1),
            group_mode="token", **SMALL)
