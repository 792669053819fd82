"""The SB3-style algorithms: API contract, reproducibility, save/load, exact updates, and learning."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.logger import KVWriter, Logger, configure

import tpo_gym  # noqa: F401
from tpo_agents import DG, GRPO, PG, PPO, TPO, GroupPG, losses
from tpo_agents.modes.exact import ExactBatch
from tpo_agents.policies.decoding import StepLogProbs
from tpo_agents.rollout import stack_steps

th.set_num_threads(1)

TOKEN_KW = dict(policy_kwargs=None, seed=0, device="cpu")


def copy_env(reward: str = "bag_of_tokens", h: int = 3) -> gym.Env:
    return gym.make("TPO/TokenCopy-v0", sequence_length=h, vocab_size=2, reward=reward)


def bandit_error(model) -> float:
    """1 - pi(correct arm) of a tabular policy on the single-context bandit (arm 0 is correct)."""
    with th.no_grad():
        log_probs = model.policy.action_log_probs(th.zeros(1, dtype=th.long))
    return float(1 - log_probs.exp()[0, 0])


def token_error(model, episodes: int = 200) -> float:
    """Sampled token error of the model on fresh prompts of its own env (the paper's metric)."""
    env = gym.make_vec(
        model.env_id, num_envs=episodes, vectorization_mode="vector_entry_point", **model.env_kwargs
    )
    obs, _ = env.reset(seed=123)
    done = np.zeros(episodes, dtype=bool)
    while not done.all():
        actions, _ = model.predict(obs, deterministic=False)
        obs, _, term, trunc, infos = env.step(actions)
        done = term | trunc
    return float(infos["final_info"]["token_error"].mean())


# ------------------------------------------------------------------------------------ API


@pytest.mark.parametrize(
    "algo, kwargs",
    [
        (TPO, dict(group_mode="token", group_size=4)),
        (TPO, dict(group_mode="sequence", group_size=4)),
        (GRPO, dict(group_mode="token", group_size=4)),
        (GRPO, dict(group_mode="sequence", group_size=4, mask_zero_variance=True)),
        (DG, dict()),
        (PPO, dict()),
        (PG, dict()),
        (GroupPG, dict(group_mode="sequence", group_size=4)),
    ],
)
def test_every_algorithm_runs_on_the_token_task(algo, kwargs, tmp_path):
    model = algo("TransformerPolicy", copy_env(), batch_size=8, n_epochs=2, **kwargs, **TOKEN_KW)
    model.learn(3 * model.n_envs * 3)
    assert model.num_timesteps >= 3 * model.n_envs * 3
    path = tmp_path / "model.zip"
    model.save(path)
    loaded = algo.load(path, env=copy_env())
    obs = np.array([[0, 1, 1, 2, 2, 2]])
    for deterministic in (True, False):
        th.manual_seed(5)
        a1, _ = model.predict(obs, deterministic=deterministic)
        th.manual_seed(5)
        a2, _ = loaded.predict(obs, deterministic=deterministic)
        assert a1.tolist() == a2.tolist()


def test_same_seed_gives_the_same_losses():
    def run() -> list[float]:
        model = TPO("TransformerPolicy", copy_env(), batch_size=8, group_size=4, **TOKEN_KW)
        captured, original = [], model.group_loss

        def spy(view, diagnostics):
            loss, stats = original(view, diagnostics)
            captured.append(float(loss.detach()))
            return loss, stats

        model.group_loss = spy
        model.learn(8 * 3 * 3)
        return captured

    first = run()
    assert len(first) == 3 * 4 and first == run()


class _Rows(KVWriter):
    """Keeps every logger dump."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def write(self, key_values, key_excluded, step=0) -> None:
        self.rows.append(dict(key_values))


def _one_bandit_update(algo, n_epochs: int) -> tuple[th.Tensor, th.Tensor, dict]:
    """One logged update on the ten-armed bandit: (log pi before, log pi after, the logged row)."""
    model = algo("TabularPolicy", gym.make("TPO/KArmedBandit-v0", n_arms=10), learning_rate=0.1,
                 batch_size=100, n_epochs=n_epochs, group_mode="single", baseline=0.5, seed=0)  # fmt: skip
    rows = _Rows()
    model.set_logger(Logger(None, [rows]))
    before = model.policy.all_log_probs().detach().clone()
    model.learn(n_iterations=1)
    return before, model.policy.all_log_probs().detach(), rows.rows[-1]


@pytest.mark.parametrize("algo", [TPO, GRPO])
def test_one_epoch_logs_the_kl_after_the_step_and_no_clip_fraction(algo):
    """approx_kl = sum_a pi_old(a) (log pi_old(a) - log pi_new(a)) at the parameters after the step (> 0
    with one epoch); clip_fraction, 0 by construction at the first epoch, is logged with two epochs only;
    time/fps is a float (SB3 logs an int, 0 for runs under one step per second)."""
    old, new, row = _one_bandit_update(algo, n_epochs=1)
    expected = float((old.exp() * (old - new)).sum())
    assert expected > 1e-4 and row["train/approx_kl"] == pytest.approx(expected, rel=1e-5)
    assert "train/clip_fraction" not in row
    assert isinstance(row["time/fps"], float) and row["time/fps"] > 0
    if algo is GRPO:  # at ratio 1 the surrogate is sum_i A_i = 0: its value is 0, its gradient is not
        assert abs(row["train/loss"]) < 1e-6 and row["train/grad_norm"] > 1e-3
        assert "train/clip_fraction" in _one_bandit_update(GRPO, n_epochs=2)[2]


@pytest.mark.parametrize("algo", [TPO, GRPO])
def test_max_grad_norm_clips_the_step_and_logs_the_norm_before(algo, monkeypatch):
    """With max_grad_norm = c the optimizer steps on g min(1, c / ||g||); train/grad_norm is ||g|| before
    clipping, as TRL logs it; None leaves the gradient as it is."""
    seen = []
    for max_grad_norm in (None, 1e-4):
        model = algo("TabularPolicy", gym.make("TPO/KArmedBandit-v0", n_arms=10), learning_rate=0.1,
                     batch_size=100, n_epochs=1, group_mode="single", baseline=0.5, seed=0,
                     max_grad_norm=max_grad_norm)
        rows = _Rows()
        model.set_logger(Logger(None, [rows]))
        step = model.policy.optimizer.step

        def recording_step(*args, model=model, step=step, **kwargs):
            grads = [p.grad for p in model.policy.parameters() if p.grad is not None]
            seen.append(float(th.cat([g.flatten() for g in grads]).norm()))
            return step(*args, **kwargs)

        monkeypatch.setattr(model.policy.optimizer, "step", recording_step)
        model.learn(n_iterations=1)
        seen.append(rows.rows[-1]["train/grad_norm"])
    unclipped, logged, clipped, logged_clipped = seen
    assert unclipped == pytest.approx(logged, rel=1e-5) and unclipped > 1e-3
    assert clipped == pytest.approx(1e-4, rel=1e-4) and logged_clipped == pytest.approx(unclipped, rel=1e-5)


@pytest.mark.parametrize(("setting", "match"), [({"max_grad_norm": 0.0}, "max_grad_norm"),
                                                ({"max_grad_norm": 1.0, "n_seeds": 2}, "n_seeds > 1")])
def test_max_grad_norm_refuses_bad_values(setting, match):
    with pytest.raises(ValueError, match=match):
        TPO("TabularPolicy", gym.make("TPO/KArmedBandit-v0", n_arms=10), batch_size=10, group_mode="single",
            **setting)


def test_terminal_reward_rejects_token_groups():
    with pytest.raises(ValueError, match="terminal"):
        TPO("TransformerPolicy", copy_env("terminal"), batch_size=4, group_size=2, group_mode="token",
            **TOKEN_KW).learn(12)


def test_unknown_group_mode_names_the_choices():
    with pytest.raises(ValueError, match="single"):
        PPO("TransformerPolicy", copy_env(), group_mode="token", **TOKEN_KW)
    with pytest.raises(ValueError, match="interactions"):
        TPO("TransformerPolicy", copy_env(), match="both", **TOKEN_KW)


def test_interaction_matching_scales_batch_and_learning_rate():
    model = PPO("TransformerPolicy", copy_env(), batch_size=4, group_size=8, match="interactions", **TOKEN_KW)
    assert model.n_envs == 32
    assert model.lr_schedule(1.0) == pytest.approx(1e-3 * math.sqrt(8))
    grouped = TPO(
        "TransformerPolicy", copy_env(), batch_size=4, group_size=8, match="interactions", **TOKEN_KW
    )
    assert grouped.n_envs == 4 and grouped.lr_schedule(1.0) == pytest.approx(1e-3)


# ------------------------------------------------------------------------ exact updates


def exact_direction(algo_cls, p: float, **kwargs) -> float:
    """The exact update direction g = -grad of one context with pi_0 = p, projected on v = e_0 - pi.

    The App. B closed forms say g = beta * v for every method (CE: beta = 1).
    """
    env = gym.make("TPO/MultiContextBandit-v0", n_contexts=1, n_arms=10)
    model = algo_cls("TabularPolicy", env, group_mode="exact", learning_rate=0.1, **kwargs)
    rest = (1 - p) / 9
    logits = th.log(th.tensor([p] + [rest] * 9))
    with th.no_grad():
        next(model.policy.parameters()).copy_(logits.reshape(1, 10))
    rewards = th.zeros(1, 10)
    rewards[0, 0] = 1.0
    old = model.policy.action_log_probs(th.zeros(1, dtype=th.long)).detach()
    batch = ExactBatch(obs=th.zeros(1, dtype=th.long), rewards=rewards, old_log_probs=old)
    view = model.mode.view(model._view, batch, model.mode.log_probs(model.policy, batch))
    loss, _ = getattr(model, f"{model._view}_loss")(view)
    (grad,) = th.autograd.grad(loss, [next(model.policy.parameters())])
    pi = old.exp()[0]
    v = th.nn.functional.one_hot(th.tensor(0), 10).float() - pi
    g = -grad[0]
    beta = float(g @ v / (v @ v))
    assert th.allclose(g, beta * v, atol=1e-6), "the exact update must point along e_y - pi"
    return beta


def test_exact_updates_reproduce_the_closed_form_betas():
    p = 0.1
    lam = math.exp(10 / 3)
    assert exact_direction(TPO, p) == pytest.approx(p * (lam - 1) / (1 - p + lam * p), rel=1e-4)
    assert exact_direction(PG, p) == pytest.approx(p, rel=1e-4)
    assert exact_direction(DG, p) == pytest.approx(p / (1 + p), rel=1e-4)
    assert exact_direction(GRPO, p) == pytest.approx(math.sqrt(p / (1 - p)), rel=1e-4)
    assert round(exact_direction(TPO, p), 2) == 0.73
    assert round(exact_direction(GRPO, p), 2) == 0.33
    assert round(exact_direction(DG, p), 2) == 0.09


# ------------------------------------------------------------------------------- learning


@pytest.mark.parametrize("algo", [TPO, PG, DG, GRPO])
def test_tabular_methods_learn_the_ten_armed_bandit(algo):
    """TPO reaches < 5% error in 60 steps of 100 samples; the single-sample peers at least halve it."""
    env = gym.make("TPO/KArmedBandit-v0", n_arms=10)
    kwargs = dict(learning_rate=0.1, batch_size=100, n_epochs=1, group_mode="single", baseline=0.5, seed=0)
    model = algo("TabularPolicy", env, **kwargs)
    before = bandit_error(model)
    model.learn(100 * 60)
    assert bandit_error(model) < (0.05 if algo is TPO else before / 2)


@pytest.mark.slow
def test_tpo_token_solves_token_copy():
    model = TPO("TransformerPolicy", copy_env(h=3), batch_size=64, group_size=8, group_mode="token", seed=0)
    model.learn(64 * 3 * 40)
    assert token_error(model) < 0.05


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo, kwargs",
    [(PPO, {}), (DG, {}), (GRPO, dict(group_mode="token")), (TPO, dict(group_mode="sequence"))],
)
def test_peers_learn_token_copy(algo, kwargs):
    model = algo("TransformerPolicy", copy_env(h=3), batch_size=64, group_size=8, seed=0, **kwargs)
    before = token_error(model)
    model.learn(model.n_envs * 3 * 40)
    assert token_error(model) < before * 0.6


@pytest.mark.parametrize("mode, vocab", [("token", 2), ("sequence", 2), ("token", 50), ("sequence", 50)])
def test_rollout_log_probs_equal_teacher_forced_rescoring(mode, vocab):
    """The KV-cached rollout and the re-scoring of distinct sequences are exact, in batch order.

    V = 2 makes prompts and sequences repeat; V = 50 makes every one distinct.
    """
    env = gym.make("TPO/TokenCopy-v0", sequence_length=4, vocab_size=vocab)
    model = TPO("TransformerPolicy", env, batch_size=6, group_size=5, group_mode=mode, seed=1)
    model.set_logger(configure(None, []))
    decoded, step = [], StepLogProbs.__call__

    def recording(self, obs, taken):
        decoded.append(step(self, obs, taken))
        return decoded[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(StepLogProbs, "__call__", recording)
        batch = model.collect(_NoCallback())
    with th.no_grad():
        rescored = model.mode.log_probs(model.policy, batch)
    assert th.allclose(rescored, stack_steps(decoded), atol=1e-5)


class _NoCallback:
    def on_rollout_start(self):
        pass

    def on_rollout_end(self):
        pass

    def update_locals(self, _):
        pass

    def on_step(self):
        return True


def _single_batch(contexts: list[int], actions: list[int], rewards: list[float], n_actions: int):
    from tpo_agents.modes.episodes import Episodes

    n = len(contexts)
    return Episodes(
        obs=th.zeros(n, 1, dtype=th.long),
        actions=th.tensor(actions).reshape(n, 1),
        old_log_probs=th.full((n, 1, n_actions), -math.log(n_actions)),
        token_rewards=th.tensor(rewards).reshape(n, 1),
        returns=th.tensor(rewards),
        contexts=th.tensor(contexts),
        n_contexts=n,
        group_size=1,
    )


def test_single_mode_tabular_groups_average_the_onehot_scores():
    """Tabular single context (paper Sec. 3.1): S_k = (1/B) sum_i (r_i - 0.5) 1[a_i = k] over one group."""
    env = gym.make("TPO/KArmedBandit-v0", n_arms=4)
    model = TPO("TabularPolicy", env, batch_size=4, group_mode="single", baseline=0.5, learning_rate=0.1)
    batch = _single_batch([0, 0, 0, 0], [0, 1, 1, 3], [1.0, 0.0, 0.0, 0.0], 4)
    view = model.mode.group_view(batch, batch.old_log_probs)
    assert view.logscores.shape == (1, 4)
    assert th.allclose(view.scores, th.tensor([[0.5, -1.0, 0.0, -0.5]]) / 4)


@pytest.mark.slow
def test_single_mode_mnist_groups_are_per_sample():
    """MNIST (paper Sec. 3.3, App. C): one group per image, u = (+3, -1/3, ...) or (-3, +1/3, ...)."""
    pytest.importorskip("tpo_gym.data")
    try:
        env = gym.make("TPO/MNISTBandit-v0")
    except FileNotFoundError:
        pytest.skip("no MNIST data")
    model = TPO("MlpPolicy", env, batch_size=3, group_mode="single", baseline="expected", n_epochs=1)
    batch = _single_batch([7, 7, 9], [2, 5, 0], [1.0, 0.0, 0.0], 10)
    u = losses.standardize(model.mode.group_view(batch, batch.old_log_probs).scores)
    assert u.shape == (3, 10)
    assert u[0, 2].item() == pytest.approx(3.0) and u[0, 0].item() == pytest.approx(-1 / 3)
    assert u[1, 5].item() == pytest.approx(-3.0) and u[1, 0].item() == pytest.approx(1 / 3)
