"""Single-sample losses (PG, PPO, DG, CE) and their baselines and advantages: one sampled trajectory per
context, or every action weighted by pi_old (shapes: :mod:`tpo_agents.losses`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tpo_agents.losses.groups import (
    _clipped_surrogate,
    _mean_batch_sum_rest,
    per_token,
)


def position_baseline_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """Per-token advantage with the batch-mean baseline at the same position (paper Sec. 3.4, PPO/DG).

    A[b, t] = r[b, t] - mean_b r[:, t]   (no return-to-go, no critic).
    """
    return rewards - rewards.mean(0, keepdim=True)


def baseline_advantages(
    rewards: torch.Tensor, baseline: str | float, old_log_probs: torch.Tensor | None = None
) -> torch.Tensor:
    """A = r - b for the single-sample methods, ``rewards`` ``[B]`` or ``[B, T]``.

    ``"batch_mean"``: b = mean_b r at the same position (:func:`position_baseline_advantages`);
    ``"expected"``: b = sum_k pi_old(k)^2 per sample (:func:`expected_baseline`, the MNIST baseline;
    needs ``old_log_probs`` ``[B, A]`` of the first step); a number: the constant b (0.5 on the tabular runs).
    """
    if baseline == "batch_mean":
        return position_baseline_advantages(rewards)
    if baseline == "expected":
        if old_log_probs is None:
            raise ValueError("the 'expected' baseline needs the behaviour log-probs [B, A]")
        b = expected_baseline(old_log_probs)
        return rewards - b.reshape(-1, *([1] * (rewards.dim() - 1)))
    if isinstance(baseline, str):
        raise ValueError(f"baseline={baseline!r}: use 'batch_mean', 'expected' or a number")
    return rewards - float(baseline)


def batch_standardized_advantages(
    rewards: torch.Tensor, eps: float = 1e-8, eps_inside_sqrt: bool = False
) -> torch.Tensor:
    """Rewards standardised across the batch axis 0, the paper's single-sample "GRPO".

    MNIST (paper Sec. 3.3):   A = (r - mean_B r) / (popstd_B r + eps)
    tabular (paper Sec. 3.1): A = (r - mean_B r) / sqrt(mean_B (r - mean_B r)^2 + eps)  (eps_inside_sqrt)
    """
    centred = rewards - rewards.mean(0, keepdim=True)
    variance = centred.pow(2).mean(0, keepdim=True)
    scale = (variance + eps).sqrt() if eps_inside_sqrt else variance.sqrt() + eps
    return centred / scale


def expected_baseline(log_probs: torch.Tensor) -> torch.Tensor:
    """MNIST PG/DG baseline b = sum_k pi_k^2 over the last (action) axis, sg (paper Sec. 3.3), ``[B]``."""
    return log_probs.detach().exp().pow(2).sum(-1)


def policy_standardized_advantages(
    old_log_probs: torch.Tensor, rewards: torch.Tensor, eps: float = 1e-8
) -> torch.Tensor:
    """Rewards of every action standardised under the policy itself, over the last (action) axis.

    A_a = (r_a - E_pi r) / sqrt(Var_pi r + eps), pi = exp(old_log_probs): the exact expectation of the
    single-sample "GRPO" on the multi-context bandit (paper Sec. 3.2), whose step is then
    sqrt(p / (1 - p)) (e_y - pi) for p = E_pi r.
    """
    pi = old_log_probs.detach().exp()
    mean = (pi * rewards).sum(-1, keepdim=True)
    variance = (pi * (rewards - mean).pow(2)).sum(-1, keepdim=True)
    return (rewards - mean) / (variance + eps).sqrt()


def onehot_scores(actions: torch.Tensor, advantages: torch.Tensor, n_actions: int) -> torch.Tensor:
    """Single-sample TPO score vector over the whole action set: s = A * onehot(a), ``[B, n_actions]``.

    MNIST (paper Sec. 3.3) uses it per image; u = standardize(s) is then (+3, -1/3 ...) if A > 0 and
    (-3, +1/3 ...) if A < 0 for 10 actions. The tabular single-context arm scores are its batch mean,
    ``onehot_scores(a, A, K).mean(0)`` (paper Sec. 3.1).
    """
    return advantages.detach().unsqueeze(-1) * F.one_hot(actions, n_actions).to(advantages.dtype)


def context_mean_scores(scores: torch.Tensor, contexts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Average the per-sample score vectors ``[N, A]`` of the samples that share a context.

    S_c = (1/n_c) sum_{i: c_i = c} s_i, one group per distinct context (the tabular runs, paper
    Sec. 3.1-3.2). Returns ``(S [C, A], first [C])``, ``first`` the row of each context's first sample
    (whose log-probs stand for the context), contexts in increasing order.
    """
    unique, inverse = torch.unique(contexts, return_inverse=True)
    total = scores.new_zeros(len(unique), scores.shape[-1]).index_add_(0, inverse, scores)
    counts = scores.new_zeros(len(unique)).index_add_(0, inverse, scores.new_ones(len(inverse)))
    rows = torch.arange(len(inverse), device=inverse.device)
    first = torch.full_like(unique, len(inverse)).scatter_reduce_(0, inverse, rows, reduce="amin")
    return total / counts.unsqueeze(-1), first


def pg_loss(
    logp: torch.Tensor, advantages: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """REINFORCE: loss = - mean_b sum_t w[b,t] sg(A[b,t]) logp[b,t]; any baseline is already in A.

    ``weights`` (like ``logp``, or ``[B]``): a 0/1 mask of padding tokens, or pi_old(a) over a whole
    action set for the exact expected update; None means 1.
    """
    advantages = per_token(advantages.detach(), logp)
    return -_mean_batch_sum_rest(advantages * logp, _weights(weights, logp))


def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float = 0.2,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token clipped PPO surrogate without critic or KL (paper Sec. 3.4).

    rho = exp(logp - sg old_logp) (unclamped),
    loss = - mean_b sum_t w min(rho A, clip(rho, 1-eps, 1+eps) A); ``weights`` as in :func:`pg_loss`.
    """
    surrogate = _clipped_surrogate(logp - old_logp.detach(), per_token(advantages.detach(), logp), clip_range)
    return -_mean_batch_sum_rest(surrogate, _weights(weights, logp))


def dg_gate(advantages: torch.Tensor, surprisal: torch.Tensor, eta: float = 1.0) -> torch.Tensor:
    """Delightful Gradient gate w = sigmoid(U * l / eta), elementwise (paper Sec. 3)."""
    return torch.sigmoid(advantages * surprisal / eta)


def dg_weights(
    logp: torch.Tensor, advantages: torch.Tensor, eta: float = 1.0, surprisal_eps: float = 0.0
) -> torch.Tensor:
    """The Delightful Gradient's per-token weight sg(sigmoid(A l / eta) A), like ``logp``.

    l = -log(pi(a) + surprisal_eps) at the current parameters (sg; the exact tabular update uses
    eps = :data:`TABULAR_SURPRISAL_EPS`, elsewhere l = -logp).
    """
    logp_now = logp.detach()
    surprisal = -torch.log(logp_now.exp() + surprisal_eps) if surprisal_eps > 0 else -logp_now
    advantages = per_token(advantages.detach(), logp)
    return dg_gate(advantages, surprisal, eta) * advantages


def dg_loss(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    eta: float = 1.0,
    surprisal_eps: float = 0.0,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Delightful Gradient (paper Sec. 2, Eq. for DG; Sec. 3.1-3.4).

    loss = - mean_b sum_t w sg(sigmoid(A l / eta) A) logp, with l as in :func:`dg_weights` and
    ``weights`` as in :func:`pg_loss`.
    """
    delight = dg_weights(logp, advantages, eta, surprisal_eps)
    return -_mean_batch_sum_rest(delight * logp, _weights(weights, logp))


def _weights(weights: torch.Tensor | None, logp: torch.Tensor) -> torch.Tensor | None:
    return None if weights is None else per_token(weights, logp, "weights")


def ce_loss(log_probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Supervised oracle: loss = - mean_b log pi(y_b); ``log_probs`` is ``[B, n_classes]``."""
    return -log_probs.gather(-1, labels.unsqueeze(-1)).mean()
