"""Populations (``n_seeds = S``): member m of one run learns exactly as the run with seed ``seed + m``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger

import tpo_gym  # noqa: F401
from tpo_agents.policies import NormalizedStep, TabularPolicy
from tpo_agents.policies.base import multinomial_rows
from tpo_agents.zoo.registry import ablation_kwargs, get_algo

th.set_num_threads(1)

BANDIT = dict(learning_rate=0.1, batch_size=20, n_epochs=1, group_mode="single")
EXACT = dict(learning_rate=0.1, batch_size=100, n_epochs=1, group_mode="exact",
             policy_kwargs={"init": "normal"})
MNIST = dict(learning_rate=1e-3, batch_size=8, group_mode="single")
ARMS, CONTEXTS = {"n_arms": 10}, {"n_contexts": 12, "n_arms": 5}
TOKENS = {"sequence_length": 4, "vocab_size": 3, "reward": "bag_of_tokens"}
#: H = 2: every member's batches carry some reward. A batch without any (every group's scores equal) has a
#: zero gradient in exact arithmetic, and Muon would orthogonalize its rounding noise into a full step.
TERMINAL = {"sequence_length": 2, "vocab_size": 2, "reward": "terminal"}
SMALL = dict(learning_rate=1e-3, batch_size=4, group_size=4, n_epochs=2,
             policy_kwargs={"d_model": 16, "n_layers": 1})
#: SGD: Adam's first steps are +-lr wherever a gradient is near zero (terms that cancel: here ~1e-5, whose
#: sign the two summation orders' rounding decides), which would compare rounding, not the members.
SMALL_MLP = dict(learning_rate=1e-2, batch_size=4, group_size=4, n_epochs=2,
                 policy_kwargs={"net_arch": [8], "optimizer_class": th.optim.SGD})
REVERSAL, TRANSFORMER = "TPO/TokenReversal-v0", "TransformerPolicy"
#: The attention key bias adds the same q.b to every logit of a query, so its gradient is zero in exact
#: arithmetic: Muon orthogonalizes the rounding noise there into a full-size step that differs between
#: any two summation orders. It changes no output; it is left out of the comparisons.
NOISE_ONLY = {"model.layers.0.attn.key.bias"}

#: id -> (algo, env id, env kwargs, policy, algorithm kwargs)
CASES = {
    "single-tpo": ("tpo", "TPO/KArmedBandit-v0", ARMS, "TabularPolicy", {**BANDIT, "baseline": 0.5}),
    "single-grpo": ("grpo", "TPO/KArmedBandit-v0", ARMS, "TabularPolicy", BANDIT),
    "single-pg-batch-mean": ("pg", "TPO/KArmedBandit-v0", ARMS, "TabularPolicy", BANDIT),
    "single-dg": ("dg", "TPO/KArmedBandit-v0", ARMS, "TabularPolicy", {**BANDIT, "baseline": 0.5}),
    **{f"exact-{algo}": (algo, "TPO/MultiContextBandit-v0", CONTEXTS, "TabularPolicy", EXACT)
       for algo in ("tpo", "grpo", "dg", "pg", "ce")},
    "mnist-tpo": ("tpo", "TPO/MNISTBandit-v0", {}, "MlpPolicy", {**MNIST, "baseline": "expected"}),
    "mnist-grpo-2-epochs": ("grpo", "TPO/MNISTBandit-v0", {}, "MlpPolicy", {**MNIST, "n_epochs": 2}),
    "mnist-group-pg": ("group_pg", "TPO/MNISTBandit-v0", {}, "MlpPolicy", {**MNIST, "baseline": "expected"}),
    "mnist-ppo": ("ppo", "TPO/MNISTBandit-v0", {}, "MlpPolicy", MNIST),
    "mnist-ce": ("ce", "TPO/MNISTBandit-v0", {}, "MlpPolicy", {**MNIST, "group_mode": "exact"}),
    # an MLP with more actions than ACTION_MAJOR_MAX_ACTIONS: its logits row-major
    "mlp-token-tpo-v12": ("tpo", REVERSAL, {"sequence_length": 3, "vocab_size": 12}, "MlpPolicy",
                          {**SMALL_MLP, "group_mode": "token"}),
    "mlp-token-single-ppo-v12": ("ppo", REVERSAL, {"sequence_length": 3, "vocab_size": 12}, "MlpPolicy",
                                 {**SMALL_MLP, "group_mode": "single"}),
    **{f"token-{algo}": (algo, REVERSAL, TOKENS, TRANSFORMER, {**SMALL, "group_mode": "token"})
       for algo in ("tpo", "grpo_masked", "group_pg")},
    **{f"token-single-{algo}": (algo, REVERSAL, TOKENS, TRANSFORMER, {**SMALL, "group_mode": "single"})
       for algo in ("ppo", "dg", "grpo")},
    **{f"sequence-{algo}": (algo, REVERSAL, TERMINAL, TRANSFORMER, {**SMALL, "group_mode": "sequence"})
       for algo in ("tpo", "grpo")},
}


class _Errors(BaseCallback):
    """Per-member task errors of every batch, and the sampled actions of the first."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[np.ndarray] = []
        self.logged: list[float] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self.errors.append(self.model.member_rollout["task_error"].copy())
        self.logged.append(self.model.logger.name_to_value["rollout/task_error"])


def _run(case: str, seed: int, n_seeds: int, n_updates: int = 3):
    algo, env_id, env_kwargs, policy, kwargs = CASES[case]
    kwargs = {**ablation_kwargs(algo), **kwargs}
    model = get_algo(algo)(policy, env_id, env_kwargs=env_kwargs, seed=seed, n_seeds=n_seeds,
                           device="cpu", **kwargs)
    model.set_logger(Logger(None, []))
    errors = _Errors()
    model.learn(n_iterations=n_updates, callback=errors)
    model.logged_errors = errors.logged
    return model, np.array(errors.errors)


def _member_parameters(model, member: int, grad: bool = False) -> list[th.Tensor]:
    """Member ``member``'s parameters (or gradients): [out, in] kernels and [out, 1] biases, or the table."""
    policy = model.policy
    if hasattr(policy, "model"):
        tensors = [p for name, p in policy.named_parameters() if name not in NOISE_ONLY]
    elif hasattr(policy, "kernels"):
        tensors = [t for pair in zip(policy.kernels, policy.biases, strict=True) for t in pair]
    else:
        tensors = [policy.logits]
    return [(t.grad if grad else t.detach())[member] for t in tensors]


def _single_parameters(model, grad: bool = False) -> list[th.Tensor]:
    """The same of a one-member run."""
    policy = model.policy
    if hasattr(policy, "model"):
        named = policy.named_parameters()
        return [(p.grad if grad else p.detach()) for name, p in named if name not in NOISE_ONLY]
    if not hasattr(policy, "net"):
        return [(policy.logits.grad if grad else policy.logits.detach())]
    out = []
    for linear in (m for m in policy.net if isinstance(m, th.nn.Linear)):
        weight, bias = (linear.weight.grad, linear.bias.grad) if grad else (linear.weight, linear.bias)
        out += [weight.detach(), bias.detach().unsqueeze(-1)]
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_member_equals_the_run_with_its_seed(case):
    population, errors = _run(case, seed=3, n_seeds=3)
    assert errors.shape == (3, 3)
    for member in range(3):
        single, single_errors = _run(case, seed=3 + member, n_seeds=1)
        # the same sampled actions and contexts: the same batch errors, update by update
        np.testing.assert_allclose(errors[:, member], single_errors[:, 0], rtol=0, atol=1e-6)
        for got, want in zip(_member_parameters(population, member), _single_parameters(single), strict=True):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("case", ["single-tpo", "exact-dg", "mnist-tpo", "mnist-grpo-2-epochs",
                                  "token-tpo", "token-single-ppo", "sequence-grpo", "mlp-token-tpo-v12",
                                  "mlp-token-single-ppo-v12"])
def test_first_update_loss_and_gradient_are_each_members_own(case):
    """The population's loss is the members' mean; its gradient on member m is that of the run with
    seed m (losses are summed over members)."""
    algo, env_id, env_kwargs, policy, kwargs = CASES[case]
    kwargs = {**ablation_kwargs(algo), **kwargs}

    def first_batch(seed: int, n_seeds: int):
        model = get_algo(algo)(policy, env_id, env_kwargs=env_kwargs, seed=seed, n_seeds=n_seeds,
                               device="cpu", **kwargs)
        model.set_logger(Logger(None, []))
        model._setup_learn(10**6, None)
        callback = _Errors()
        callback.init_callback(model)
        batch = model.collect(callback)
        model.policy.optimizer.zero_grad()
        _, loss = model._accumulate_gradients(batch)
        return model, loss

    population, loss = first_batch(5, 2)
    singles = [first_batch(5 + m, 1) for m in range(2)]
    assert loss == pytest.approx(np.mean([s[1] for s in singles]), abs=1e-6)
    for member, (single, _) in enumerate(singles):
        got = _member_parameters(population, member, grad=True)
        for g, want in zip(got, _single_parameters(single, grad=True), strict=True):
            np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=0, atol=1e-5)


def test_member_envs_replay_the_contexts_of_their_seeds():
    env = gym.make_vec("TPO/TokenReversal-v0", num_envs=6, vectorization_mode="vector_entry_point",
                       n_seeds=3, sequence_length=4)
    obs, _ = env.reset(seed=11, options={"group_size": 2})
    obs2 = env.step(np.zeros(6, dtype=np.int64))  # the stream continues per member across resets
    for member in range(3):
        alone = gym.make_vec("TPO/TokenReversal-v0", num_envs=2, vectorization_mode="vector_entry_point",
                             sequence_length=4)
        want, _ = alone.reset(seed=11 + member, options={"group_size": 2})
        np.testing.assert_array_equal(obs[2 * member: 2 * member + 2], want)
        np.testing.assert_array_equal(obs2[0][2 * member: 2 * member + 2],
                                      alone.step(np.zeros(2, dtype=np.int64))[0])


def test_member_env_sizes_are_checked():
    with pytest.raises(ValueError, match="n_seeds=4"):
        gym.make_vec("TPO/KArmedBandit-v0", num_envs=6, vectorization_mode="vector_entry_point", n_seeds=4)
    with pytest.raises(ValueError, match="group_size=2 x n_seeds=3"):
        gym.make_vec("TPO/KArmedBandit-v0", num_envs=9, vectorization_mode="vector_entry_point",
                     n_seeds=3, group_size=2)


def test_member_generators_draw_as_each_member_alone():
    log_probs = th.randn(6, 4).log_softmax(-1)
    generators = [th.Generator().manual_seed(s) for s in (1, 2, 3)]
    draws = multinomial_rows(log_probs, 5, generators)
    for member, seed in enumerate((1, 2, 3)):
        alone = multinomial_rows(log_probs[2 * member: 2 * member + 2], 5, [th.Generator().manual_seed(seed)])
        assert th.equal(draws[2 * member: 2 * member + 2], alone)


def test_inverse_cdf_draws_follow_the_probabilities_and_skip_impossible_actions():
    probs = th.tensor([[0.5, 0.0, 0.25, 0.25], [0.0, 0.0, 0.0, 1.0]])
    draws = multinomial_rows(probs.log(), 40_000, [th.Generator().manual_seed(0)])
    counts = th.stack([th.bincount(row, minlength=4) for row in draws]).double() / 40_000
    assert th.allclose(counts, probs.double(), atol=0.01) and counts[0, 1] == 0 and counts[1, 3] == 1
    uniforms = th.rand(2, 3, generator=th.Generator().manual_seed(0))  # the draw is F^-1(u), u ~ U[0, 1)
    manual = th.searchsorted(probs.cumsum(-1), uniforms * probs.sum(-1, keepdim=True), right=True)
    assert th.equal(multinomial_rows(probs.log(), 3, [th.Generator().manual_seed(0)]), manual)


def test_normalized_step_normalises_each_member_by_its_own_norm():
    table = th.nn.Parameter(th.zeros(2, 1, 2))
    optimizer = NormalizedStep([table], lr=0.1, n_seeds=2)
    table.grad = th.tensor([[[3.0, 4.0]], [[0.0, -2.0]]])
    optimizer.step()
    np.testing.assert_allclose(table.detach().numpy(), [[[-0.06, -0.08]], [[0.0, 0.1]]], atol=1e-7)


def test_timesteps_count_each_members_interactions_and_logs_are_member_means():
    model, errors = _run("single-tpo", seed=0, n_seeds=4, n_updates=2)
    assert model.num_timesteps == 2 * 20  # two batches of B = 20 one-step episodes, per member
    assert model.logged_errors == pytest.approx(errors.mean(1))


def test_population_saves_and_loads(tmp_path):
    model, _ = _run("mnist-tpo", seed=0, n_seeds=2, n_updates=1)
    model.save(tmp_path / "population")
    loaded = get_algo("tpo").load(tmp_path / "population", device="cpu")
    assert loaded.n_seeds == 2 and loaded.policy.n_seeds == 2
    for got, want in zip(loaded.policy.parameters(), model.policy.parameters(), strict=True):
        assert th.equal(got, want)


def test_bad_population_settings_are_one_line_errors():
    with pytest.raises(ValueError, match="n_seeds"):
        get_algo("tpo")("TabularPolicy", "TPO/KArmedBandit-v0", n_seeds=0, group_mode="single")
    with pytest.raises(ValueError, match="n_seeds=2: .* has no populations"):
        from tpo_agents.policies import LLMPolicy  # noqa: F401  (a policy class without populations)
        from tpo_agents.policies.base import GroupPolicy

        class Plain(GroupPolicy):
            pass

        Plain(gym.spaces.Discrete(2), gym.spaces.Discrete(2), lambda _: 0.1, n_seeds=2)
    table = TabularPolicy(gym.spaces.Discrete(3), gym.spaces.Discrete(2), lambda _: 0.1, n_seeds=2)
    with pytest.raises(ValueError, match="5 rows cannot be split among 2 members"):
        table.action_log_probs(th.zeros(5, dtype=th.long))


def test_twenty_seed_final_errors_equal_the_per_seed_runs():
    """The distribution of final errors over 20 seeds is that of 20 separate runs (here: seed by seed)."""
    population, errors = _run("exact-tpo", seed=0, n_seeds=20, n_updates=15)
    singles = np.array([_run("exact-tpo", seed=s, n_seeds=1, n_updates=15)[1][-1, 0] for s in range(20)])
    np.testing.assert_allclose(errors[-1], singles, rtol=0, atol=1e-6)
    assert errors[-1].std() > 0  # 20 different learners, not one copied


def test_member_unique_shares_rows_within_members_only():
    from tpo_agents.policies.decoding import member_unique

    keys = th.tensor([[1, 0], [1, 0], [2, 0], [1, 0], [0, 1], [0, 1], [0, 1], [0, 1]])  # 2 members x 4 rows
    distinct, inverse = member_unique(keys, 1)
    want_distinct, want_inverse = th.unique(keys, dim=0, return_inverse=True)
    assert th.equal(distinct, want_distinct) and th.equal(inverse, want_inverse)
    distinct, inverse = member_unique(keys, 2)
    assert distinct.shape == (4, 2)  # member 0 has 2 distinct rows, member 1 one (padded to 2)
    assert th.equal(distinct[inverse], keys)  # every row is its distinct row
    assert (inverse[:4] < 2).all() and (inverse[4:] >= 2).all()  # each member reads its own block
    assert th.equal(distinct[2:], th.tensor([[0, 1], [0, 1]]))  # the padding copies the member's row


@pytest.mark.parametrize("shape, low, high", [((300, 3), 0, 5), ((200, 20), 0, 2), ((200, 20), 0, 16),
                                             ((40, 2), -3, 4), ((9, 1), 7, 8), ((1, 4), 0, 3)])
def test_unique_rows_is_torch_unique_over_rows(shape, low, high):
    """The mixed-radix shortcut (and, for keys too wide for int64 codes, the fallback: V = 16, 20 columns)
    gives torch's distinct rows, in its order, and its inverse."""
    from tpo_agents.policies.decoding import unique_rows

    keys = th.randint(low, high, shape, generator=th.Generator().manual_seed(shape[0]))
    keys[len(keys) // 2:] = keys[: len(keys) - len(keys) // 2].clone()  # repeated rows
    distinct, inverse = unique_rows(keys)
    want_distinct, want_inverse = th.unique(keys, dim=0, return_inverse=True)
    assert th.equal(distinct, want_distinct) and th.equal(inverse, want_inverse)
    assert distinct.dtype == keys.dtype


@pytest.mark.parametrize("keys", [
    th.tensor([[2**62, -(2**62)], [0, 0], [2**62, -(2**62)]]),  # spans past int64: torch's unique
    th.tensor([[True, False], [True, True], [True, False]]),  # bool: torch's unique
    th.tensor([[255, 0], [3, 7], [255, 0]], dtype=th.uint8),
])
def test_unique_rows_takes_any_key_dtype_and_range(keys):
    from tpo_agents.policies.decoding import unique_rows

    distinct, inverse = unique_rows(keys)
    want_distinct, want_inverse = th.unique(keys, dim=0, return_inverse=True)
    assert th.equal(distinct, want_distinct) and th.equal(inverse, want_inverse)


def test_a_policy_without_populations_is_refused_with_one_line():
    class OneTable(TabularPolicy):
        supports_members = False

    with pytest.raises(ValueError, match="n_seeds=2: OneTable has no populations; use n_seeds=1"):
        get_algo("tpo")(OneTable, "TPO/KArmedBandit-v0", n_seeds=2, group_mode="single", env_kwargs=ARMS)


@pytest.mark.parametrize("case", ["exact-tpo", "mnist-tpo", "token-tpo"])
def test_member_policy_is_one_seed_as_a_plain_policy(case):
    population, _ = _run(case, seed=2, n_seeds=3, n_updates=1)
    single, _ = _run(case, seed=3, n_seeds=1, n_updates=1)
    member = population.policy.member_policy(1)
    assert member.n_seeds == 1
    obs = th.as_tensor(np.stack([population.observation_space.sample() for _ in range(4)]))
    want = single.policy.action_log_probs(obs).detach()
    np.testing.assert_allclose(member.action_log_probs(obs).detach().numpy(), want.numpy(), atol=1e-5)
    np.testing.assert_allclose(population.policy.member_log_probs(obs)[1].detach().numpy(), want.numpy(),
                               atol=1e-5)
    actions, _ = member.predict(obs.numpy(), deterministic=True)
    assert actions.shape == (4,)
    with pytest.raises(ValueError, match=r"member must be an integer in \[0, 2\], got 3"):
        population.policy.member_policy(3)


def test_single_mode_groups_a_members_contexts_apart_and_refuses_unequal_coverage():
    from tpo_agents.modes import SingleMode

    mode = SingleMode(4, 1, "prompts", 0.5, gym.spaces.Discrete(3), n_seeds=2)
    keyed = mode._member_contexts(th.tensor([0, 2, 2, 0, 1, 1, 0, 0]))
    assert keyed.tolist() == [0, 2, 2, 0, 4, 4, 3, 3]  # member 1's context c is 3 + c
    with pytest.raises(ValueError, match=r"different numbers of contexts \(\[1, 2\]\)"):
        mode._member_contexts(th.tensor([0, 2, 2, 0, 1, 1, 1, 1]))
