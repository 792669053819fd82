"""Losses of TPO and its peers as pure functions of tensors.

Every loss is to be minimised and works for any policy (logit table, MLP, transformer, LLM).

Shapes
------
* Grouped losses take groups shaped ``[..., K]``: any leading group axes (``[B, K]`` for
  sequence-level groups, ``[B, H, K]`` for token-level groups), the K candidates on the last axis.
  ``L`` is a candidate's log-score under the policy (sequence log-prob, token log-prob, or any
  unnormalised log-score) and ``s`` its raw score. "mean over groups" = mean over all leading axes.
* Single-sample losses take per-token log-probs ``logp`` shaped ``[B, T]`` (``[B]`` or ``[B, 1]`` for
  bandits) and reduce as "sum over every axis after the first, mean over the batch axis".

Notation follows the paper: ``sg`` = stop-gradient (``detach``), popstd = population std (divide by N).
"""

import torch
import torch.nn.functional as F


def _mean_batch_sum_rest(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Sum over every axis after the first (tokens), mean over the first (batch) axis."""
    if mask is not None:
        x = x * mask
    return x.reshape(x.shape[0], -1).sum(1).mean()


def _popstd(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Population standard deviation sqrt(mean((x - mean x)^2)), keepdim."""
    return (x - x.mean(dim, keepdim=True)).pow(2).mean(dim, keepdim=True).sqrt()


# ---------------------------------------------------------------------------------------------------
# Group primitives


def check_scores(scores: torch.Tensor, logscores: torch.Tensor | None = None) -> None:
    """Raise ``ValueError`` unless ``scores`` is a finite ``[..., K]`` tensor (shaped like ``logscores``)."""
    if scores.dim() < 1 or scores.shape[-1] < 1:
        raise ValueError(f"scores must be shaped [..., K] with K >= 1, got shape {tuple(scores.shape)}")
    if logscores is not None and logscores.shape != scores.shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} and log-scores {tuple(logscores.shape)} must have the same shape"
        )
    if not torch.isfinite(scores).all():
        bad = scores[~torch.isfinite(scores)].flatten()[:3].tolist()
        raise ValueError(f"scores must be finite numbers; got {bad} (NaN or infinite)")


def standardize(scores: torch.Tensor, threshold: float = 1e-6) -> torch.Tensor:
    """Within-group score standardisation u(s) over the last axis K (spec 1.1).

    c = s - mean_K s,  sigma = popstd_K s;  u = c / sigma if sigma > threshold else c.
    No epsilon is added; a group of equal scores gives u = 0 exactly.
    """
    centred = scores - scores.mean(-1, keepdim=True)
    sigma = _popstd(scores, -1)
    return centred / torch.where(sigma > threshold, sigma, torch.ones_like(sigma))


def zero_variance_groups(scores: torch.Tensor, threshold: float = 1e-6) -> torch.Tensor:
    """Bool mask ``[...]`` of the groups whose scores carry no signal: popstd_K s <= threshold."""
    return _popstd(scores, -1).squeeze(-1) <= threshold


def tpo_target(
    old_logscores: torch.Tensor, scores: torch.Tensor, eta: float = 1.0, anchor: bool = True
) -> torch.Tensor:
    """TPO target q over the K candidates of each group (paper Eq. 2, spec 1.2), detached.

    anchored:  q = softmax_K( log_softmax_K(sg L_old) + u(s) / eta )
    no anchor: q = softmax_K( u(s) / eta )
    ``old_logscores`` may be unnormalised (only their softmax over K matters). Raises ``ValueError``
    on non-finite scores or mismatched shapes.
    """
    check_scores(scores, old_logscores)
    logits = standardize(scores.detach()) / eta
    if anchor:
        logits = logits + torch.log_softmax(old_logscores.detach(), -1)
    return torch.softmax(logits, -1)


def tpo_loss(logscores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """TPO cross-entropy to the frozen target (paper Eq. 3, spec 1.3).

    loss = mean_groups [ - sum_K q_i log p_i ],  p = softmax_K(L_theta).
    Gradient w.r.t. the group logscores: (p - q) / n_groups. Duplicate candidates stay separate entries.
    """
    return -(target.detach() * torch.log_softmax(logscores, -1)).sum(-1).mean()


def group_pg_loss(logscores: torch.Tensor, scores: torch.Tensor, eta: float = 1.0) -> torch.Tensor:
    """Group PG, TPO's same-signal scalar ablation (spec 2.2).

    loss = - mean_groups sum_K sg(u(s)/eta) * L_theta   (L_theta not renormalised over the group).
    """
    check_scores(scores, logscores)
    weights = standardize(scores.detach()) / eta
    return -(weights * logscores).sum(-1).mean()


def grpo_advantages(scores: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """GRPO group advantages over the last axis K: A = (s - mean_K s) / (popstd_K s + eps).

    Raises ``ValueError`` on non-finite scores.
    """
    check_scores(scores)
    scores = scores.detach()
    return (scores - scores.mean(-1, keepdim=True)) / (_popstd(scores, -1) + eps)


def grpo_loss(
    logscores: torch.Tensor,
    old_logscores: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float = 0.2,
    beta: float = 0.04,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Clipped GRPO with a k3 KL to the rollout snapshot (spec 2.2, 2.3).

    lambda = clip(L_theta - sg L_old, -20, 20),  rho = exp(lambda),  kl = exp(-lambda) + lambda - 1,
    loss = - mean_groups sum_K [ min(rho A, clip(rho, 1-eps, 1+eps) A) - beta kl ].
    Per-candidate L is the sequence log-prob (sequence-level) or the token log-prob (token-level).
    ``mask`` (bool ``[...]``, one entry per group; GRPO-masked): only the groups where it is True count,
    and the sum over them is divided by max(1, #True) instead of the number of groups.
    """
    log_ratio = (logscores - old_logscores.detach()).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    advantages = advantages.detach()
    surrogate = torch.min(ratio * advantages, ratio.clamp(1 - clip_range, 1 + clip_range) * advantages)
    kl = torch.exp(-log_ratio) + log_ratio - 1
    per_group = (surrogate - beta * kl).sum(-1)
    if mask is None:
        return -per_group.mean()
    return -(per_group * mask).sum() / mask.sum().clamp(min=1)


# ---------------------------------------------------------------------------------------------------
# Single-sample losses (PPO, DG, REINFORCE, MNIST and tabular bandits)


def position_baseline_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """Per-token advantage with the batch-mean baseline at the same position (spec 2.1).

    A[b, t] = r[b, t] - mean_b r[:, t]   (no return-to-go, no critic).
    """
    return rewards - rewards.mean(0, keepdim=True)


def batch_standardized_advantages(
    rewards: torch.Tensor, eps: float = 1e-8, eps_inside_sqrt: bool = False
) -> torch.Tensor:
    """Rewards standardised across the batch axis 0, the paper's single-sample "GRPO".

    MNIST (spec 2.5):   A = (r - mean_B r) / (popstd_B r + eps)
    tabular (spec 2.6): A = (r - mean_B r) / sqrt(mean_B (r - mean_B r)^2 + eps)   (eps_inside_sqrt=True)
    """
    centred = rewards - rewards.mean(0, keepdim=True)
    variance = centred.pow(2).mean(0, keepdim=True)
    scale = (variance + eps).sqrt() if eps_inside_sqrt else variance.sqrt() + eps
    return centred / scale


def expected_baseline(log_probs: torch.Tensor) -> torch.Tensor:
    """MNIST PG/DG baseline b = sum_k pi_k^2 over the last (action) axis, sg (spec 2.5); shape ``[B]``."""
    return log_probs.detach().exp().pow(2).sum(-1)


def onehot_scores(actions: torch.Tensor, advantages: torch.Tensor, n_actions: int) -> torch.Tensor:
    """Single-sample TPO score vector over the whole action set: s = A * onehot(a), ``[B, n_actions]``.

    MNIST (spec 2.5) uses it per image; u = standardize(s) is then (+3, -1/3 ...) if A > 0 and
    (-3, +1/3 ...) if A < 0 for 10 actions. The tabular single-context arm scores are its batch mean,
    ``onehot_scores(a, A, K).mean(0)`` (spec 2.6).
    """
    return advantages.detach().unsqueeze(-1) * F.one_hot(actions, n_actions).to(advantages.dtype)


def pg_loss(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """REINFORCE: loss = - mean_b sum_t sg(A[b,t]) * logp[b,t]; any baseline is already in A.

    ``mask`` (same shape as ``logp``) zeroes padding tokens.
    """
    return -_mean_batch_sum_rest(advantages.detach() * logp, mask)


def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float = 0.2,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token clipped PPO surrogate without critic or KL (spec 2.1).

    rho = exp(logp - sg old_logp) (unclamped),
    loss = - mean_b sum_t min(rho A, clip(rho, 1-eps, 1+eps) A).  ``mask`` zeroes padding tokens.
    """
    ratio = (logp - old_logp.detach()).exp()
    advantages = advantages.detach()
    surrogate = torch.min(ratio * advantages, ratio.clamp(1 - clip_range, 1 + clip_range) * advantages)
    return -_mean_batch_sum_rest(surrogate, mask)


def dg_gate(advantages: torch.Tensor, surprisal: torch.Tensor, eta: float = 1.0) -> torch.Tensor:
    """Delightful Gradient gate w = sigmoid(U * l / eta), elementwise (spec 1.4)."""
    return torch.sigmoid(advantages * surprisal / eta)


def dg_loss(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    eta: float = 1.0,
    surprisal_eps: float = 0.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Delightful Gradient (spec 1.4, 2.1, 2.5, 2.6).

    l = -log(pi(a) + surprisal_eps) at the current parameters (sg; the tabular runs use eps = 1e-30),
    loss = - mean_b sum_t sg(sigmoid(A l / eta) * A) * logp.  ``mask`` zeroes padding tokens.
    """
    logp_now = logp.detach()
    surprisal = -torch.log(logp_now.exp() + surprisal_eps) if surprisal_eps > 0 else -logp_now
    weights = dg_gate(advantages.detach(), surprisal, eta) * advantages.detach()
    return -_mean_batch_sum_rest(weights * logp, mask)


def ce_loss(log_probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Supervised oracle: loss = - mean_b log pi(y_b); ``log_probs`` is ``[B, n_classes]``."""
    return -log_probs.gather(-1, labels.unsqueeze(-1)).mean()


# ---------------------------------------------------------------------------------------------------
# Diagnostics (no gradient)


@torch.no_grad()
def approx_kl(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(pi_old || pi_theta): mean of exp(-lambda) + lambda - 1, lambda = logp - old_logp."""
    log_ratio = logp - old_logp
    return (torch.exp(-log_ratio) + log_ratio - 1).mean()


@torch.no_grad()
def clip_fraction(logp: torch.Tensor, old_logp: torch.Tensor, clip_range: float = 0.2) -> torch.Tensor:
    """Fraction of entries whose ratio rho = exp(logp - old_logp) lies outside [1 - eps, 1 + eps]."""
    return ((logp - old_logp).exp().sub(1).abs() > clip_range).float().mean()


@torch.no_grad()
def target_mass(weights: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean weight per winning and per losing candidate over the whole batch (spec 5, weight_winners/losers).

    winners = candidates with score > 0 (successful), losers = the rest;
    returns (sum of weights on winners / max(1, #winners), sum on losers / max(1, #losers)).
    ``weights`` is the TPO target q, or |A| for GRPO/PPO.
    """
    winners = scores > 0
    per_winner = (weights * winners).sum() / winners.sum().clamp(min=1)
    per_loser = (weights * ~winners).sum() / (~winners).sum().clamp(min=1)
    return per_winner, per_loser


@torch.no_grad()
def cosine_misalignment(g1: torch.Tensor, g2: torch.Tensor) -> torch.Tensor:
    """1 - cos(g1, g2) on flattened vectors, cos = <g1,g2> / (sqrt(|g1|^2 + 1e-12) sqrt(|g2|^2 + 1e-12))."""
    g1, g2 = g1.flatten(), g2.flatten()
    cos = (g1 @ g2) / ((g1 @ g1 + 1e-12).sqrt() * (g2 @ g2 + 1e-12).sqrt())
    return 1 - cos
