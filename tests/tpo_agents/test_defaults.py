"""SB3 defaults that fit the env: the natural collection mode and K of an algorithm built without them,
and populations that predict and evaluate with one member."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th
import yaml
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

import tpo_gym
from tpo_agents import CE, DG, GRPO, PG, PPO, TPO, GroupPG
from tpo_agents.learn_loop import GroupAlgorithm
from tpo_agents.modes import MODES, EnvTraits
from tpo_agents.policies.base import multinomial_rows
from tpo_agents.zoo.registry import ALGOS, EXTERNAL_ALGOS, get_algo
from tpo_gym.sb3 import make_sb3_vec_env

th.set_num_threads(1)

CONFIGS = Path(__file__).resolve().parents[2] / "zoo_configs"
KARMED, MULTI, MNIST = tpo_gym.ENV_IDS[:3]
TOKEN_IDS = tpo_gym.ENV_IDS[3:]
TERMINAL = {"reward": "terminal", "sequence_length": 3, "vocab_size": 2}
TOKENS = {"sequence_length": 3, "vocab_size": 2}
SMALL_TRANSFORMER = {"d_model": 16, "n_layers": 1}

#: algorithm -> natural mode on (k-armed bandit, multi-context bandit, MNIST, dense token task,
#: terminal-reward token task, text env); None: the algorithm has no mode for that env.
NATURAL = {
    TPO: ("single", "exact", "single", "token", "sequence", "text"),
    GRPO: ("single", "exact", "single", "token", "sequence", "text"),
    DG: ("single", "exact", "single", "single", "single", "text"),
    PG: ("single", "exact", "single", "single", "single", "text"),
    PPO: ("single", "single", "single", "single", "single", "text"),
    GroupPG: ("single", "single", "single", "token", "sequence", "text"),
    CE: ("exact", "exact", "exact", None, None, None),
}


def _policy(env_id: str) -> tuple[str, dict]:
    if "Token" in env_id:
        return "TransformerPolicy", SMALL_TRANSFORMER
    return ("MlpPolicy", {}) if env_id == MNIST else ("TabularPolicy", {})


@pytest.mark.parametrize("algo", list(NATURAL), ids=lambda cls: cls.__name__)
def test_the_natural_mode_of_every_env(algo: type[GroupAlgorithm]) -> None:
    bandits, dense, terminal, text = NATURAL[algo][:3], NATURAL[algo][3], NATURAL[algo][4], NATURAL[algo][5]
    cases = [*zip((KARMED, MULTI, MNIST), ({},) * 3, bandits, strict=True),
             *((env_id, {}, dense) for env_id in TOKEN_IDS),  # the registered reward: bag_of_tokens
             *((env_id, {"reward": "sequential"}, dense) for env_id in TOKEN_IDS[:1]),
             *((env_id, TERMINAL, terminal) for env_id in TOKEN_IDS),
             *((env_id, {}, text) for env_id in tpo_gym.TEXT_ENV_IDS)]
    for env_id, env_kwargs, want in cases:
        if want is None:
            with pytest.raises(ValueError, match=f"{algo.__name__} .*{env_id!r}") as error:
                algo.natural_mode(env_id, env_kwargs)
            assert "\n" not in str(error.value)
            continue
        assert algo.natural_mode(env_id, env_kwargs) == want, (env_id, env_kwargs)
        if want == "text":
            continue  # a text model needs a language model (tests/tpo_agents/modes/test_text_mode.py)
        assert algo.natural_mode(gym.make(env_id, **env_kwargs)) == want  # an env: its id and kwargs
        policy, policy_kwargs = _policy(env_id)
        model = algo(policy, env_id, env_kwargs=env_kwargs or (TOKENS if "Token" in env_id else {}),
                     batch_size=4, policy_kwargs=policy_kwargs, seed=0, device="cpu")
        assert model.group_mode == model.mode.name == want
        assert model.group_size == (8 if want in ("token", "sequence") else 1)  # K is unused in the others


def test_the_zoo_configs_set_the_natural_mode_of_each_env() -> None:
    """Every zoo entry's group_mode is what the algorithm takes on that env without one."""
    checked = 0
    for name in sorted(set(ALGOS) - EXTERNAL_ALGOS):
        entries = yaml.safe_load((CONFIGS / f"{name}.yml").read_text())
        for env_id, entry in entries.items():
            if env_id == "default" or "group_mode" not in entry:
                continue
            mode = get_algo(name).natural_mode(env_id, entry.get("env_kwargs"))
            assert mode == entry["group_mode"], (name, env_id)
            checked += 1
    assert checked > 40


def test_an_explicit_group_mode_always_wins() -> None:
    model = TPO("TabularPolicy", MULTI, group_mode="single", batch_size=4, device="cpu")
    assert model.group_mode == "single" and model.n_envs == 4
    model = TPO("MlpPolicy", MNIST, group_mode="exact", batch_size=4, device="cpu")
    assert model.group_mode == "exact" and model.group_size == 1
    model = TPO("TabularPolicy", KARMED, group_mode="token", batch_size=4, device="cpu")
    assert model.group_mode == "token" and model.group_size == 8
    model = GRPO("TransformerPolicy", TOKEN_IDS[0], env_kwargs=TOKENS, group_mode="sequence", group_size=3,
                 batch_size=2, policy_kwargs=SMALL_TRANSFORMER, device="cpu")
    assert (model.group_mode, model.group_size, model.n_envs) == ("sequence", 3, 6)
    model = PG("TabularPolicy", MULTI, group_mode="single", match="interactions", batch_size=4, device="cpu")
    assert model.group_size == 8 and model.n_envs == 32  # interaction matching reads K: B*K contexts


def test_k_is_unused_where_its_default_is_one() -> None:
    """Single mode matched by prompts ignores K: the default 1 trains exactly as K = 8 did."""
    def run(**kwargs):
        model = TPO("TabularPolicy", MULTI, env_kwargs={"n_contexts": 5, "n_arms": 4}, group_mode="single",
                    batch_size=6, baseline=0.5, learning_rate=0.1, n_epochs=1, seed=3, device="cpu", **kwargs)
        model.set_logger(Logger(None, []))
        return model.learn(n_iterations=3).policy.logits.detach()

    assert th.equal(run(), run(group_size=8))


def test_the_mode_predicates_read_the_env_traits() -> None:
    def traits_of(env_id: str, **env_kwargs) -> EnvTraits:
        return EnvTraits(lambda: gym.make(env_id, **env_kwargs))

    traits = {env_id: traits_of(env_id) for env_id in (KARMED, MULTI, MNIST)}
    traits["terminal"] = traits_of(TOKEN_IDS[0], **TERMINAL)
    assert (traits[KARMED].horizon, traits[KARMED].n_contexts, traits[MULTI].n_contexts) == (1, 1, 100)
    assert traits[MNIST].n_contexts is None and traits[MNIST].dense_reward
    assert traits["terminal"].horizon == 3 and not traits["terminal"].dense_reward
    token, sequence, exact = MODES["token"], MODES["sequence"], MODES["exact"]
    assert not token.can_collect(traits["terminal"]) and sequence.is_natural_for(traits["terminal"])
    assert exact.is_natural_for(traits[MULTI]) and not exact.is_natural_for(traits[KARMED])
    assert exact.can_collect(traits[MNIST]) and not exact.can_collect(traits["terminal"])
    lazy = EnvTraits(lambda: pytest.fail("a text env's mode needs no probe"))
    assert MODES["text"].is_natural_for(lazy) and lazy.env is None


def test_no_mode_for_the_env_is_one_line() -> None:
    message = r"^CE has no collection mode for 'TPO/TokenCopy-v0' with .*: exact mode needs one-step"
    with pytest.raises(ValueError, match=message):
        CE("TransformerPolicy", "TPO/TokenCopy-v0", env_kwargs=TERMINAL)
    with pytest.raises(ValueError, match="'CartPole-v1' is not one: train other envs with an SB3 algorithm"):
        PPO("MlpPolicy", "CartPole-v1")


def test_load_keeps_the_recorded_group_mode(tmp_path: Path) -> None:
    """A zip records its resolved mode and K (an old one: the then-default token mode on a bandit)."""
    model = TPO("TabularPolicy", KARMED, group_mode="token", batch_size=4, device="cpu")
    del model.predict_member  # a zip saved before populations predicted
    model.save(tmp_path / "old")
    loaded = TPO.load(tmp_path / "old", device="cpu")
    assert (loaded.group_mode, loaded.group_size, loaded.predict_member) == ("token", 8, 0)
    loaded = TPO.load(tmp_path / "old", env=KARMED, device="cpu")
    assert loaded.group_mode == loaded.mode.name == "token" and loaded.n_envs == 4


# ----------------------------------------------------------------------------------- populations

#: id -> (algorithm, env id, env kwargs, policy, kwargs): one population per policy family
POPULATIONS = {
    "tabular": (TPO, MULTI, {"n_contexts": 6, "n_arms": 4}, "TabularPolicy",
                dict(learning_rate=0.1, n_epochs=1, policy_kwargs={"init": "normal"})),
    "mlp": (DG, MNIST, {}, "MlpPolicy", dict(batch_size=8, baseline="expected")),
    "transformer": (TPO, TOKEN_IDS[2], TOKENS, "TransformerPolicy",
                    dict(batch_size=4, group_size=2, n_epochs=1, policy_kwargs=SMALL_TRANSFORMER)),
}


def _population(case: str, n_seeds: int = 3, n_updates: int = 1) -> GroupAlgorithm:
    algo, env_id, env_kwargs, policy, kwargs = POPULATIONS[case]
    model = algo(policy, env_id, env_kwargs=env_kwargs, n_seeds=n_seeds, seed=4, device="cpu", **kwargs)
    model.set_logger(Logger(None, []))
    return model.learn(n_iterations=n_updates)


def _observations(model: GroupAlgorithm, n: int) -> np.ndarray:
    env = gym.make(model.env_id, **model.env_kwargs)
    return np.stack([env.reset(seed=seed)[0] for seed in range(n)])


@pytest.mark.parametrize("case", list(POPULATIONS))
def test_a_population_predicts_any_number_of_observations_with_one_member(case: str) -> None:
    model = _population(case)
    obs = _observations(model, 5)
    for member in (0, 2):
        model.set_predict_member(member)
        plain = model.policy.member_policy(member)
        want, _ = plain.predict(obs, deterministic=True)
        actions, state = model.predict(obs, deterministic=True)
        assert state is None and actions.shape == (5,) and np.array_equal(actions, want)
        one, _ = model.predict(obs[0], deterministic=True)
        assert np.shape(one) == np.shape(plain.predict(obs[0])[0]) and one == want[0]
        with th.no_grad():
            got = model.policy.predicting_policy().action_log_probs(th.as_tensor(obs)).numpy()
            np.testing.assert_allclose(got, plain.action_log_probs(th.as_tensor(obs)).numpy(), atol=1e-6)
    model.set_predict_member(0)
    other, _ = model.predict(obs, deterministic=True, member=1)
    assert np.array_equal(other, model.policy.member_policy(1).predict(obs, deterministic=True)[0])
    assert model.predict_member == model.policy.predict_member == 0  # member= is for that call only


def test_sampled_predictions_use_the_members_generator() -> None:
    model = _population("tabular")
    obs = np.arange(6).repeat(50)
    model.set_predict_member(1)
    generator = th.Generator()
    generator.set_state(model.policy.member_generators[1].get_state())
    with th.no_grad():
        probs = model.policy.member_policy(1).action_log_probs(th.as_tensor(obs)).exp()
    want = multinomial_rows(probs.log(), 1, [generator]).reshape(-1).numpy()
    global_state = th.get_rng_state()
    actions, _ = model.predict(obs)
    assert np.array_equal(actions, want)
    assert th.equal(th.get_rng_state(), global_state)  # neither sampling nor the member copy touch it


@pytest.mark.parametrize("case", list(POPULATIONS))
def test_the_predicting_member_is_cached_and_follows_training(case: str) -> None:
    model = _population(case)
    obs = _observations(model, 4)
    keys = list(model.policy.state_dict())
    model.predict(obs)
    first = model.policy.predicting_policy()
    assert model.policy.predicting_policy() is first  # no rebuild between updates
    model.learn(n_iterations=1, reset_num_timesteps=False)
    assert model.policy.predicting_policy() is first  # refreshed in place after the optimizer step
    with th.no_grad():
        got = first.action_log_probs(th.as_tensor(obs))
        want = model.policy.member_policy(0).action_log_probs(th.as_tensor(obs))
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)
    assert list(model.policy.state_dict()) == keys  # the copy is no submodule: nothing more is saved


@pytest.mark.parametrize("case", list(POPULATIONS))
def test_evaluate_policy_runs_on_a_population(case: str) -> None:
    model = _population(case)
    _, env_id, env_kwargs, _, _ = POPULATIONS[case]
    one_env = DummyVecEnv([lambda: Monitor(gym.make(env_id, **env_kwargs))])
    mean, _ = evaluate_policy(model, one_env, n_eval_episodes=3)
    vec_env = VecMonitor(make_sb3_vec_env(env_id, n_envs=4, seed=0, **env_kwargs))
    rewards, lengths = evaluate_policy(model, vec_env, n_eval_episodes=8, deterministic=True,
                                       return_episode_rewards=True)
    assert np.isfinite(mean) and len(rewards) == len(lengths) == 8
    vec_env.close()


def test_the_predict_member_is_checked_and_saved(tmp_path: Path) -> None:
    model = _population("tabular", n_updates=1)
    with pytest.raises(ValueError, match=r"^member must be an integer in \[0, 2\], got 3$"):
        model.set_predict_member(3)
    with pytest.raises(ValueError, match=r"member must be an integer in \[0, 2\], got -1"):
        model.predict(np.arange(2), member=-1)
    model.set_predict_member(2)
    model.save(tmp_path / "population")
    loaded = TPO.load(tmp_path / "population", device="cpu")
    assert loaded.predict_member == loaded.policy.predict_member == 2
    obs = np.arange(6)
    want, _ = model.predict(obs, deterministic=True)
    assert np.array_equal(loaded.predict(obs, deterministic=True)[0], want)
    plain = TPO("TabularPolicy", KARMED, device="cpu")
    with pytest.raises(ValueError, match=r"member must be an integer in \[0, 0\], got 1"):
        plain.set_predict_member(1)
    assert plain.predict(np.zeros(3, dtype=np.int64), member=0)[0].shape == (3,)
