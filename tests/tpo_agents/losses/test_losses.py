"""Tests of tpo_agents/losses/ against hand-computed values and the paper's closed forms."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tpo_agents.test_layout import action_major
from tpo_agents import losses as L

torch.set_num_threads(1)

LAMBDA = math.exp(10 / 3)  # TPO's odds factor for a one-hot score over 10 actions


def t(values, **kwargs) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, **kwargs)


def close(actual: torch.Tensor, expected, tol: float = 1e-9) -> bool:
    return torch.allclose(actual.double(), torch.as_tensor(expected, dtype=torch.float64), atol=tol, rtol=tol)


def grad_of(loss_fn, x: torch.Tensor) -> torch.Tensor:
    x = x.detach().clone().requires_grad_(True)
    loss_fn(x).backward()
    return x.grad


# ---------------------------------------------------------------------------------------------------
# Standardisation and TPO


def test_standardize_hand_values_and_threshold():
    u = L.standardize(t([[1.0, 0.0, -1.0], [2.0, 2.0, 2.0]]))
    sigma = math.sqrt(2 / 3)
    assert close(u, [[1 / sigma, 0.0, -1 / sigma], [0.0, 0.0, 0.0]])
    # below the threshold u = 0 exactly (paper App. A), not the centred scores
    assert L.standardize(t([1.0, 1.0 + 2e-8])).eq(0).all()
    # equal scores whose float32 mean is off by rounding (K = 3, s = 0.9: s - mean = 6e-8, which the
    # reference's A = c / (sigma + 1e-8) would turn into A = 6) still give u = 0 and A = 0 exactly
    equal = torch.full((1, 3), 0.9)
    assert (equal - equal.mean(-1, keepdim=True)).ne(0).all()
    assert L.standardize(equal).eq(0).all() and L.grpo_advantages(equal).eq(0).all()
    assert close(L.standardize(t([1.0, 1.0 + 2e-8]), threshold=1e-9), [-1.0, 1.0], tol=1e-6)


def test_zero_variance_groups():
    mask = L.zero_variance_groups(t([[[1.0, 1.0], [0.0, 1.0]], [[0.5, 0.5], [3.0, 3.0 + 1e-9]]]))
    assert mask.tolist() == [[True, False], [True, True]]


def test_tpo_target_hand_values_anchor_vs_no_anchor():
    p_old, scores = [0.7, 0.2, 0.1], t([1.0, 0.0, -1.0])
    u1 = 1 / math.sqrt(2 / 3)
    tilt = [math.exp(u1), 1.0, math.exp(-u1)]
    anchored = [p * w for p, w in zip(p_old, tilt, strict=True)]
    anchored = [x / sum(anchored) for x in anchored]
    free = [w / sum(tilt) for w in tilt]
    # L_old unnormalised on purpose: only its softmax matters
    q = L.tpo_target(torch.log(t(p_old)) + 3.0, scores)
    q_free = L.tpo_target(torch.log(t(p_old)), scores, anchor=False)
    assert close(q, anchored) and close(q_free, free)
    assert q[0] > q_free[0]  # the anchor keeps the mass the old policy already had on the winner
    assert abs(q[0].item() - 0.912) < 1e-3 and abs(q_free[0].item() - 0.7245) < 1e-3


def test_tpo_target_no_anchor_ignores_old_and_sums_to_one():
    scores = t([[0.0, 1.0, 1.0, 0.0], [0.3, 0.1, 0.2, 0.9]])
    q1 = L.tpo_target(torch.randn(2, 4, dtype=torch.float64), scores, eta=0.5, anchor=False)
    q2 = L.tpo_target(torch.randn(2, 4, dtype=torch.float64), scores, eta=0.5, anchor=False)
    assert close(q1, q2) and close(q1.sum(-1), [1.0, 1.0])
    assert close(q1, torch.softmax(L.standardize(scores) / 0.5, -1))


def test_tpo_zero_variance_group_and_large_eta_give_old_policy():
    old = t([[0.5, -1.0, 2.0, 0.0]])
    p_old = torch.softmax(old, -1)
    q = L.tpo_target(old, t([[1.0, 1.0, 1.0, 1.0]]))
    assert close(q, p_old)
    assert close(grad_of(lambda x: L.tpo_loss(x, q), old), torch.zeros(1, 4))  # first epoch: no update
    assert close(L.tpo_target(old, t([[1.0, 0.0, 0.0, 1.0]]), eta=1e9), p_old, tol=1e-8)


def test_tpo_loss_hand_value():
    logscores = torch.log(t([[1.0, 1.0], [1.0, 3.0]]))  # p = (1/2, 1/2), (1/4, 3/4)
    target = t([[0.9, 0.1], [0.2, 0.8]])
    expected = -(math.log(0.5) + (0.2 * math.log(0.25) + 0.8 * math.log(0.75))) / 2
    assert close(L.tpo_loss(logscores, target), expected)


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 3), min_size=1, max_size=2),
    k=st.integers(2, 6),
    eta=st.floats(0.25, 4.0),
    anchor=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_tpo_gradient_is_p_minus_q_over_n_groups(shape, k, eta, anchor, seed):
    gen = torch.Generator().manual_seed(seed)
    logscores = 3 * torch.randn(*shape, k, generator=gen, dtype=torch.float64)
    old = logscores + 0.5 * torch.randn(*shape, k, generator=gen, dtype=torch.float64)
    scores = torch.randint(0, 3, (*shape, k), generator=gen).double()
    q = L.tpo_target(old, scores, eta=eta, anchor=anchor)
    grad = grad_of(lambda x: L.tpo_loss(x, q), logscores)
    n_groups = math.prod(shape)
    assert close(grad, (torch.softmax(logscores, -1) - q) / n_groups, tol=1e-10)


def test_group_pg_loss_hand_value_and_gradient():
    logscores = t([[-1.0, -2.0], [-0.5, -3.0]])
    scores = t([[1.0, 0.0], [2.0, 2.0]])  # u = (1, -1) and (0, 0)
    assert close(L.group_pg_loss(logscores, scores, eta=2.0), -((-1.0 + 2.0) / 2 + 0.0) / 2)
    grad = grad_of(lambda x: L.group_pg_loss(x, scores, eta=2.0), logscores)
    assert close(grad, [[-0.25, 0.25], [0.0, 0.0]])


# ---------------------------------------------------------------------------------------------------
# GRPO


def test_grpo_advantages_hand_values():
    adv = L.grpo_advantages(t([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]))
    sigma = math.sqrt(0.1875)
    assert close(adv[0], [0.75 / (sigma + 1e-8)] + [-0.25 / (sigma + 1e-8)] * 3)
    assert close(adv[1], [0.0] * 4)


def test_grpo_loss_hand_value():
    old = t([[-1.0, -2.0]])
    new = old + torch.log(t([[1.5, 0.5]]))  # ratios 1.5 and 0.5
    adv = t([[1.0, -1.0]])
    surrogate = min(1.5, 1.2) + min(-0.5, -0.8)  # both clipped: 1.2 - 0.8
    kl = sum(math.exp(-math.log(r)) + math.log(r) - 1 for r in (1.5, 0.5))
    assert close(L.grpo_loss(new, old, adv), -(surrogate - 0.04 * kl))
    assert close(L.grpo_loss(new, old, adv, beta=0.0, clip_range=0.6), -(1.5 - 0.5))


def test_grpo_log_ratio_clamped_at_20():
    old, adv = t([[0.0, 0.0]]), t([[0.0, 0.0]])
    kl = math.exp(-20) + 20 - 1 + math.exp(20) - 20 - 1
    assert close(L.grpo_loss(t([[30.0, -25.0]]), old, adv, beta=1.0), kl, tol=1e-12)


def test_grpo_at_ratio_one_without_kl_is_z_scored_pg():
    gen = torch.Generator().manual_seed(0)
    logscores = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    adv = L.grpo_advantages(torch.randint(0, 2, (3, 5), generator=gen).double())
    g_grpo = grad_of(lambda x: L.grpo_loss(x, logscores, adv, beta=0.0), logscores)
    g_pg = grad_of(lambda x: L.pg_loss(x, adv), logscores)
    assert close(g_grpo, g_pg) and g_pg.abs().sum() > 0
    # and the k3 KL adds nothing at ratio 1: value 0, gradient exp(-0) - 1 ... = 0
    g_kl = grad_of(lambda x: L.grpo_loss(x, logscores, torch.zeros_like(adv), beta=1.0), logscores)
    assert close(g_kl, torch.zeros(3, 5))


def test_k3_kl_zero_at_ratio_one_positive_otherwise():
    old = t([[0.0, -1.0, -2.0]])
    zero_adv = torch.zeros_like(old)
    assert close(L.grpo_loss(old, old, zero_adv, beta=1.0), 0.0)
    for shift in (-0.3, 0.1, 2.0):
        assert L.grpo_loss(old + shift, old, zero_adv, beta=1.0) > 0  # loss = +beta * kl


@pytest.mark.parametrize("loss", ["grpo", "ppo"])
def test_clipping_stops_gradient_in_the_right_direction(loss):
    def grad_at(ratio, adv):
        old, a = t([[0.0]]), t([[adv]])
        if loss == "grpo":
            fn = lambda x: L.grpo_loss(x, old, a, clip_range=0.2, beta=0.0)  # noqa: E731
        else:
            fn = lambda x: L.ppo_loss(x, old, a, clip_range=0.2)  # noqa: E731
        return grad_of(fn, t([[math.log(ratio)]])).item()

    # pushed past the trust region in the direction the advantage wants: no more gradient
    assert grad_at(1.5, +1.0) == 0.0 and grad_at(0.5, -1.0) == 0.0
    # past the region in the wrong direction: gradient -rho*A still pulls it back
    assert grad_at(1.5, -1.0) == pytest.approx(1.5) and grad_at(0.5, +1.0) == pytest.approx(-0.5)
    # inside the region the gradient is -rho*A
    assert grad_at(1.1, +2.0) == pytest.approx(-2.2)


def test_grpo_masked_divides_by_informative_groups():
    scores = t([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    old = t([[-1.0, -1.0], [-0.5, -2.0], [-1.0, -2.0]])
    new = old + t([[0.1, -0.1], [0.3, 0.2], [-0.05, 0.15]])
    adv = L.grpo_advantages(scores)
    mask = ~L.zero_variance_groups(scores)
    assert mask.tolist() == [True, False, True]
    informative = [0, 2]
    per_group = [
        sum(
            min(r * a, min(max(r, 0.8), 1.2) * a) - 0.04 * (1 / r + math.log(r) - 1)
            for r, a in zip((new[g] - old[g]).exp().tolist(), adv[g].tolist(), strict=True)
        )
        for g in informative
    ]
    masked = L.grpo_loss(new, old, adv, mask=mask)
    assert close(masked, -sum(per_group) / 2)
    assert close(masked, L.grpo_loss(new[informative], old[informative], adv[informative]))
    assert close(L.grpo_loss(new, old, adv, mask=torch.zeros(3, dtype=torch.bool)), 0.0)


def test_grpo_token_level_groups_average_over_all_states():
    gen = torch.Generator().manual_seed(1)
    new = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    old = new + 0.1 * torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    adv = L.grpo_advantages(torch.randint(0, 2, (2, 3, 4), generator=gen).double())
    flat = L.grpo_loss(new.reshape(6, 4), old.reshape(6, 4), adv.reshape(6, 4))
    assert close(L.grpo_loss(new, old, adv), flat)


# ---------------------------------------------------------------------------------------------------
# Single-sample losses


def test_pg_loss_hand_value_and_mask():
    logp = t([[-1.0, -2.0], [-0.5, -3.0]])
    adv = t([[1.0, -1.0], [2.0, 0.5]])
    assert close(L.pg_loss(logp, adv), -((-1.0 + 2.0) + (-1.0 - 1.5)) / 2)
    mask = t([[1.0, 1.0], [1.0, 0.0]])
    assert close(L.pg_loss(logp, adv, weights=mask), -((-1.0 + 2.0) + (-1.0)) / 2)
    assert close(L.pg_loss(t([-1.0, -2.0]), t([1.0, 3.0])), -(-1.0 - 6.0) / 2)  # bandit logp [B]


def test_ppo_loss_hand_value_and_ratio_one_is_pg():
    old = t([[-1.0, -1.0]])
    new = old + torch.log(t([[1.1, 1.5]]))
    adv = t([[1.0, 1.0]])
    assert close(L.ppo_loss(new, old, adv), -(1.1 + 1.2))
    gen = torch.Generator().manual_seed(2)
    logp = -torch.rand(4, 3, generator=gen, dtype=torch.float64)
    adv = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    g_ppo = grad_of(lambda x: L.ppo_loss(x, logp, adv), logp)
    assert close(g_ppo, grad_of(lambda x: L.pg_loss(x, adv), logp))
    assert close(L.clip_fraction(new, old), 0.5)


def test_position_baseline():
    rewards = t([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    adv = L.position_baseline_advantages(rewards)
    assert close(adv[:, 0], [0.5, -0.5, 0.5, -0.5])
    assert close(adv[:, 1], [-0.5, -0.5, 0.5, 0.5])
    assert close(adv[:, 2], [0.25, 0.25, 0.25, -0.75])


def test_dg_gate_hand_values():
    adv = t([1.0, -1.0, 2.0, 0.0])
    surprisal = t([math.log(2), math.log(2), math.log(4), 5.0])
    assert close(L.dg_gate(adv, surprisal), [2 / 3, 1 / 3, 16 / 17, 0.5])
    assert close(
        L.dg_gate(adv, surprisal, eta=2.0),
        [math.sqrt(2) / (1 + math.sqrt(2)), 1 / (1 + math.sqrt(2)), 0.8, 0.5],
    )


def test_dg_loss_hand_value_and_surprisal_eps():
    logp = torch.log(t([[0.5], [0.25]]))
    adv = t([[1.0], [-2.0]])
    # gates: sigmoid(ln 2) = 2/3, sigmoid(-2 ln 4) = 1/17
    expected = -((2 / 3) * 1.0 * math.log(0.5) + (1 / 17) * (-2.0) * math.log(0.25)) / 2
    assert close(L.dg_loss(logp, adv), expected)
    # a tiny probability: the tabular surprisal -log(pi + 1e-30) caps l at about 69
    logp = t([[math.log(1e-40)]])
    surprisal_eps, surprisal_raw = -math.log(1e-40 + 1e-30), -math.log(1e-40)
    assert surprisal_eps == pytest.approx(69.08, abs=0.01)
    gate_eps = 1 / (1 + math.exp(-0.01 * surprisal_eps))
    gate_raw = 1 / (1 + math.exp(-0.01 * surprisal_raw))
    assert close(L.dg_loss(logp, t([[0.01]]), surprisal_eps=1e-30), -gate_eps * 0.01 * math.log(1e-40))
    assert close(L.dg_loss(logp, t([[0.01]])), -gate_raw * 0.01 * math.log(1e-40))


def test_dg_with_large_eta_is_half_pg():
    gen = torch.Generator().manual_seed(3)
    logp = -torch.rand(5, 2, generator=gen, dtype=torch.float64) * 3
    adv = torch.randn(5, 2, generator=gen, dtype=torch.float64)
    g_dg = grad_of(lambda x: L.dg_loss(x, adv, eta=1e12), logp)
    assert close(g_dg, 0.5 * grad_of(lambda x: L.pg_loss(x, adv), logp))


def test_batch_standardization_both_eps_placements():
    rewards = t([1.0, 0.0, 0.0, 0.0])
    var = 0.1875
    assert close(
        L.batch_standardized_advantages(rewards),
        [0.75 / (math.sqrt(var) + 1e-8)] + [-0.25 / (math.sqrt(var) + 1e-8)] * 3,
    )
    assert close(
        L.batch_standardized_advantages(rewards, eps=1.0),
        [0.75 / (math.sqrt(var) + 1)] + [-0.25 / (math.sqrt(var) + 1)] * 3,
    )
    inside = L.batch_standardized_advantages(rewards, eps=1.0, eps_inside_sqrt=True)
    assert close(inside, [0.75 / math.sqrt(var + 1)] + [-0.25 / math.sqrt(var + 1)] * 3)
    assert close(L.batch_standardized_advantages(t([1.0, 1.0])), [0.0, 0.0])


def test_expected_baseline_and_ce():
    log_probs = torch.log(t([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])).requires_grad_(True)
    b = L.expected_baseline(log_probs)
    assert close(b, [0.38, 0.66]) and not b.requires_grad
    assert close(L.ce_loss(log_probs, torch.tensor([1, 2])), -(math.log(0.3) + math.log(0.8)) / 2)


def test_mnist_tpo_scores_standardise_to_plus_minus_three():
    actions = torch.tensor([4, 0, 9])
    adv = t([0.3, -0.7, 0.05])
    u = L.standardize(L.onehot_scores(actions, adv, 10))
    for row, a, sign in zip(u, actions.tolist(), (1, -1, 1), strict=True):
        expected = [-sign / 3] * 10
        expected[a] = 3.0 * sign
        assert close(row, expected, tol=1e-12)


def test_mnist_tpo_loss_depends_only_on_sign_of_advantage():
    gen = torch.Generator().manual_seed(4)
    log_probs = torch.log_softmax(torch.randn(1, 10, generator=gen, dtype=torch.float64), -1)
    actions = torch.tensor([3])

    def mnist_tpo(adv):
        target = L.tpo_target(log_probs, L.onehot_scores(actions, t([adv]), 10))
        return L.tpo_loss(log_probs, target)

    assert close(mnist_tpo(0.05), mnist_tpo(0.9)) and close(mnist_tpo(-0.02), mnist_tpo(-0.8))
    assert not close(mnist_tpo(0.5), mnist_tpo(-0.5))


# ---------------------------------------------------------------------------------------------------
# Diagnostics


def test_target_mass_and_cosine_misalignment():
    q = t([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
    scores = t([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    winners, losers = L.target_mass(q, scores)
    assert close(winners, 0.6) and close(losers, (0.3 + 0.1 + 1.0) / 5)
    winners, _ = L.target_mass(q, torch.zeros_like(q))
    assert close(winners, 0.0)  # no winner: the count is floored at 1
    assert close(L.cosine_misalignment(t([1.0, 0.0]), t([[0.0, 2.0]])), 1.0)
    assert close(L.cosine_misalignment(t([1.0, 1.0]), t([2.0, 2.0])), 0.0, tol=1e-12)
    assert close(L.cosine_misalignment(t([1.0, 0.0]), t([-3.0, 0.0])), 2.0, tol=1e-12)
    assert close(L.cosine_misalignment(t([0.0, 0.0]), t([1.0, 0.0])), 1.0)


# ---------------------------------------------------------------------------------------------------
# Paper App. B: exact multi-context update weights beta(p) along v = e_0 - pi


def test_exact_multicontext_update_weights():
    p, n = 0.1, 10
    rest = t([5.0, 1.0, 3.0, 0.5, 2.0, 4.0, 1.5, 0.7, 2.5])  # deliberately asymmetric wrong-class mass
    pi = torch.cat([t([p]), (1 - p) * rest / rest.sum()])
    logits = torch.log(pi)
    v = torch.zeros(n, dtype=torch.float64)
    v[0] = 1.0
    v = v - pi
    reward = v + pi  # r(a) = 1[a = 0]

    def ascent(loss_fn):
        return -grad_of(lambda z: loss_fn(torch.log_softmax(z, -1)), logits)

    def beta(g):
        assert close(g, (g @ v) / (v @ v) * v, tol=1e-9)  # parallel to e_0 - pi
        return ((g @ v) / (v @ v)).item()

    def expectation(single_sample_loss):
        """sum_a pi(a) * ascent direction of the single-sample loss for action a."""
        return sum(
            pi[a] * ascent(lambda lp, a=a: single_sample_loss(lp[a].reshape(1, 1), a)) for a in range(n)
        )

    beta_ce = beta(ascent(lambda lp: L.ce_loss(lp[None], torch.tensor([0]))))

    def tpo(lp):
        target = L.tpo_target(lp[None].detach(), reward[None])
        return L.tpo_loss(lp[None], target)

    g_tpo = ascent(tpo)
    q = L.tpo_target(logits[None], reward[None])[0]
    assert close(g_tpo, q - pi)
    beta_tpo = beta(g_tpo)
    assert beta_tpo == pytest.approx(p * (LAMBDA - 1) / (1 - p + LAMBDA * p), abs=1e-6)

    beta_dg = beta(expectation(lambda lp, a: L.dg_loss(lp, t([[reward[a].item()]]))))
    assert beta_dg == pytest.approx(p / (1 + p), abs=1e-9)

    grpo_adv = (reward - p) / math.sqrt(p * (1 - p))
    beta_grpo = beta(expectation(lambda lp, a: L.pg_loss(lp, grpo_adv[a].reshape(1, 1))))
    assert beta_grpo == pytest.approx(math.sqrt(p / (1 - p)), abs=1e-9)

    assert beta_ce == pytest.approx(1.0)
    assert [round(b / beta_ce, 2) for b in (beta_tpo, beta_dg, beta_grpo)] == [0.73, 0.09, 0.33]


def test_bad_scores_raise_clear_errors():
    old = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="finite"):
        L.tpo_target(old, torch.tensor([[1.0, float("nan"), 0.0], [0.0, 1.0, 0.0]]))
    with pytest.raises(ValueError, match="same shape"):
        L.tpo_target(old, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="finite"):
        L.grpo_advantages(torch.tensor([[float("inf"), 0.0]]))
    with pytest.raises(ValueError, match="shape"):
        L.group_pg_loss(torch.zeros(3), torch.zeros(2))


# ------------------------------------------------------------------ shape contracts and moved maths


def test_policy_kl_by_hand():
    old, new = torch.log(t([[0.5, 0.5]])), torch.log(t([[0.25, 0.75]]))
    assert close(L.policy_kl(old, old), 0.0)
    assert close(L.policy_kl(old, new), 0.5 * math.log(2) + 0.5 * math.log(2 / 3))
    assert close(L.policy_kl(torch.cat([old, old]), torch.cat([old, new])), 0.25 * math.log(4 / 3))


def test_per_sequence_advantages_mean_the_same_as_a_column():
    gen = torch.Generator().manual_seed(3)
    logp = torch.randn(4, 4, generator=gen, dtype=torch.float64)  # T = B: the broadcasting trap
    adv = torch.randn(4, generator=gen, dtype=torch.float64)
    for loss in (L.pg_loss, L.dg_loss, lambda x, a: L.ppo_loss(x, x.detach(), a)):
        assert close(loss(logp, adv), loss(logp, adv[:, None].expand(4, 4)))
    with pytest.raises(ValueError, match=r"advantages \(3,\) must be shaped like the log-probs \(4, 4\)"):
        L.pg_loss(logp, adv[:3])


def test_grouped_losses_reject_a_bare_group():
    with pytest.raises(ValueError, match=r"pass one group as \[1, K\]"):
        L.grpo_loss(t([0.0, 1.0]), t([0.0, 1.0]), t([1.0, -1.0]))
    with pytest.raises(ValueError, match=r"\[1, K\]"):
        L.tpo_loss(t([0.0, 1.0]), t([0.5, 0.5]))
    one = L.grpo_loss(t([[0.0, 1.0]]), t([[0.0, 1.0]]), t([[1.0, -1.0]]), beta=0.0)
    pair = t([[0.0, 1.0], [0.0, 1.0]])
    two = L.grpo_loss(pair, pair, t([[1.0, -1.0]] * 2), beta=0.0)
    assert close(one, two)  # one reduction convention: sum over K, mean over groups


def test_baseline_advantages():
    rewards = t([[1.0, 0.0], [0.0, 0.0]])
    assert close(L.baseline_advantages(rewards, "batch_mean"), t([[0.5, 0.0], [-0.5, 0.0]]))
    assert close(L.baseline_advantages(rewards, 0.5), rewards - 0.5)
    old = torch.log(t([[0.5, 0.5], [1.0, 1e-300]]))
    assert close(L.baseline_advantages(t([1.0, 0.0]), "expected", old), t([0.5, -1.0]))
    with pytest.raises(ValueError, match="baseline='median'"):
        L.baseline_advantages(rewards, "median")


def test_policy_standardized_advantages_step_is_sqrt_odds():
    p = 0.2  # pi(y) = p, the correct action rewarded 1
    old = torch.log(t([[p, 1 - p]]))
    adv = L.policy_standardized_advantages(old, t([[1.0, 0.0]]))
    sigma = math.sqrt(p * (1 - p) + 1e-8)
    assert close(adv, t([[(1 - p) / sigma, -p / sigma]]))


def test_context_mean_scores_and_first_rows():
    scores = t([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
    mean, first = L.context_mean_scores(scores, torch.tensor([7, 2, 7]))
    assert close(mean, t([[3.0, 0.0], [0.5, 1.0]]))
    assert first.tolist() == [1, 0]


def test_group_diagnostics_and_target_gap():
    stats = L.group_diagnostics(t([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]]))
    assert close(stats["all_fail_frac"], 1 / 3, tol=1e-6)
    assert close(stats["zero_variance_frac"], 2 / 3, tol=1e-6)
    assert close(L.target_gap(torch.log(t([[0.25, 0.75]])), t([[0.5, 0.5]])), 0.25)


def test_exact_dg_weights_each_action_by_pi_old():
    log_probs = torch.log(t([[0.2, 0.8]])).requires_grad_(True)
    rewards = t([[1.0, 0.0]])
    pi_old = log_probs.exp().detach()
    loss = L.dg_loss(log_probs, rewards, surprisal_eps=L.TABULAR_SURPRISAL_EPS, weights=pi_old)
    gate = 1 / (1 + math.exp(math.log(0.2)))  # sigmoid(A l) with A = 1, l = -log 0.2
    assert close(loss, -0.2 * gate * math.log(0.2))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_check_scores_finds_a_non_finite_score_in_either_layout(bad: float) -> None:
    scores = torch.zeros(4, 3, 5)
    scores[2, 1, 3] = bad
    for layout in (scores, action_major(scores)):
        with pytest.raises(ValueError, match="finite"):
            L.check_scores(layout)
    L.check_scores(action_major(torch.ones(4, 3, 5)))
    L.check_scores(torch.ones(2, 3, dtype=torch.long))
