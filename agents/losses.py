"""Losses of TPO and its peers as pure functions of tensors.

Every loss is to be minimised and works for any policy (logit table, MLP, transformer, LLM).

Shapes
------
* Grouped losses take groups shaped ``[..., K]`` with at least one group axis (``[B, K]`` for
  sequence-level groups, ``[B, H, K]`` for token-level groups, ``[1, K]`` for one group), the K
  candidates on the last axis, and reduce as "sum over K, mean over the groups"; a 1-D tensor is
  rejected rather than guessed. ``L`` is a candidate's log-score under the policy (sequence
  log-prob, token log-prob, or any unnormalised log-score) and ``s`` its raw score.
* Single-sample losses take per-token log-probs ``logp`` shaped ``[B, T]`` (``[B]`` for bandits) and
  reduce as "sum over every axis after the first, mean over the batch axis". Advantages (and
  weights) have ``logp``'s shape, or ``[B]``: one value per sequence, the same as ``[B, 1]``.
* Exact updates (``exact`` mode) weight every action of the action set by ``pi_old(a)``: the
  single-sample losses take those probabilities as ``weights``.

Notation follows the paper (arXiv 2604.06159, Sec. 2): ``sg`` = stop-gradient (``detach``),
popstd = population std (divide by N). docs/algorithms.md states every formula with its choices.
"""

from typing import Any

import torch
import torch.nn.functional as F

from tpo_agents.layout import is_action_major, log_softmax_last, softmax_last

#: The tabular runs' surprisal guard, l = -log(pi(a) + 1e-30), in the exact multi-context update.
TABULAR_SURPRISAL_EPS = 1e-30


def _mean_batch_sum_rest(x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Sum over every axis after the first (tokens), mean over the first (batch) axis."""
    if weights is not None:
        x = x * weights
    return x.reshape(x.shape[0], -1).sum(1).mean()


def per_token(values: torch.Tensor, logp: torch.Tensor, name: str = "advantages") -> torch.Tensor:
    """``values`` shaped like ``logp`` ``[B, T]``: ``[B]`` (one value per sequence) means ``[B, 1]``.

    Any other shape raises ``ValueError`` naming both shapes (no silent broadcasting across axes).
    """
    if values.shape == logp.shape:
        return values
    if logp.dim() == 2 and values.shape == logp.shape[:1]:
        return values.unsqueeze(-1)
    raise ValueError(
        f"{name} {tuple(values.shape)} must be shaped like the log-probs {tuple(logp.shape)} "
        f"or [B] = {tuple(logp.shape[:1])} (one value per sequence)"
    )


def _check_groups(x: torch.Tensor, name: str = "log-scores") -> None:
    if x.dim() < 2:
        raise ValueError(
            f"{name} must be shaped [n_groups..., K]; got {tuple(x.shape)}: pass one group as [1, K]"
        )


def _centred_std(x: torch.Tensor, dim: int, correction: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """c = x - mean x and the standard deviation sqrt(mean(c^2) n / (n - correction)) over ``dim`` (keepdim,
    n entries): the population std (``correction=0``) or the sample std with Bessel's correction (1)."""
    centred = x - x.mean(dim, keepdim=True)
    variance = centred.pow(2).mean(dim, keepdim=True)
    if correction:
        n = x.shape[dim]
        variance = variance * (n / max(n - correction, 1))
    return centred, variance.sqrt()


# ---------------------------------------------------------------------------------------------------
# Group primitives


def _all_finite(x: torch.Tensor) -> bool:
    """Whether every entry of ``x`` is finite: its min and max are (both are NaN where one entry is),
    read in memory order (one pass, 4x faster than ``isfinite(x).all()``)."""
    if not x.is_floating_point() or x.numel() == 0:
        return True
    lo, hi = torch.aminmax(x.movedim(-1, 0) if is_action_major(x) else x)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def check_scores(scores: torch.Tensor, logscores: torch.Tensor | None = None) -> None:
    """Raise ``ValueError`` unless ``scores`` is a finite ``[..., K]`` tensor (shaped like ``logscores``)."""
    if scores.dim() < 1 or scores.shape[-1] < 1:
        raise ValueError(f"scores must be shaped [..., K] with K >= 1, got shape {tuple(scores.shape)}")
    if logscores is not None and logscores.shape != scores.shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} and log-scores {tuple(logscores.shape)} must have the same shape"
        )
    if not _all_finite(scores.detach()):
        bad = scores[~torch.isfinite(scores)].flatten()[:3].tolist()
        raise ValueError(f"scores must be finite numbers; got {bad} (NaN or infinite)")


def standardize(scores: torch.Tensor, threshold: float = 1e-6) -> torch.Tensor:
    """Within-group score standardisation u(s) over the last axis K (paper Sec. 2, App. A).

    c = s - mean_K s,  sigma = popstd_K s;  u = c / sigma if sigma > threshold else 0.
    No epsilon is added. A group without signal (equal scores, sigma <= threshold) gets u = 0 exactly,
    as the paper states (App. A), also where the float mean of K equal scores is off by a rounding
    error (K not a power of two).
    """
    centred, sigma = _centred_std(scores, -1)
    return _scaled_where_signal(centred, sigma, threshold)


def _scaled_where_signal(centred: torch.Tensor, sigma: torch.Tensor, threshold: float) -> torch.Tensor:
    """u = c / sigma where sigma > threshold, else exactly 0 (a group without signal)."""
    signal = sigma > threshold
    return torch.where(signal, centred / torch.where(signal, sigma, torch.ones_like(sigma)), 0.0)


def zero_variance_groups(scores: torch.Tensor, threshold: float = 1e-6) -> torch.Tensor:
    """Bool mask ``[...]`` of the groups whose scores carry no signal: popstd_K s <= threshold."""
    return _centred_std(scores, -1)[1].squeeze(-1) <= threshold


def tpo_target(
    old_logscores: torch.Tensor, scores: torch.Tensor, eta: float = 1.0, anchor: bool = True
) -> torch.Tensor:
    """TPO target q over the K candidates of each group (paper Sec. 2), detached.

    anchored:  q = softmax_K( log_softmax_K(sg L_old) + u(s) / eta ) = softmax_K( sg L_old + u(s) / eta )
    no anchor: q = softmax_K( u(s) / eta )
    computed in the second form: log_softmax_K only subtracts each group's log-sum-exp, which the
    softmax removes, so ``old_logscores`` may be unnormalised. Raises ``ValueError`` on non-finite
    scores or mismatched shapes.
    """
    check_scores(scores, old_logscores)
    logits = standardize(scores.detach()) / eta
    if anchor:  # anchor first: the sum takes the anchor's memory layout (action-major log-probs stay so)
        logits = old_logscores.detach() + logits
    return softmax_last(logits)


def group_softmax(logits: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """softmax over the last axis K (over each group's ``valid`` entries, 0 on the others and in groups
    with none valid). The TPO target and the TPO gradient's p both come from this one function, so
    that equal inputs give bitwise equal outputs."""
    if valid is None:
        return softmax_last(logits)
    return masked_log_softmax(logits, valid).exp() * valid


class _TargetCrossEntropy(torch.autograd.Function):
    """loss = mean_groups [ - sum_K q_i log p_i ] with the gradient (p - q) / n_groups on L_theta.

    The gradient is written out rather than left to autograd, whose log_softmax backward forms
    p * sum_K q - q with p = exp(log p): a rounding error away from zero where q = p_old and
    L_theta = L_old, which a normalising optimizer (Muon, Adam) turns into a full step. Here p is
    :func:`group_softmax` (L_theta), the function q comes from, so such a group's gradient is exactly
    0. Groups whose target is all zero (fewer than two valid candidates) get no gradient.
    """

    @staticmethod
    def forward(ctx: Any, logscores: torch.Tensor, target: torch.Tensor,
                valid: torch.Tensor | None) -> torch.Tensor:
        log_p = log_softmax_last(logscores) if valid is None else masked_log_softmax(logscores, valid)
        ctx.save_for_backward(logscores, target, valid)
        ctx.n_groups = logscores.numel() // max(logscores.shape[-1], 1)
        return -(target * log_p).sum(-1).mean()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        logscores, target, valid = ctx.saved_tensors
        gap = group_softmax(logscores, valid) - target
        if valid is not None:
            gap = gap * (target.sum(-1, keepdim=True) > 0)
        return gap * (grad / ctx.n_groups), None, None


def tpo_loss(
    logscores: torch.Tensor, target: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """TPO cross-entropy to the frozen target (paper Sec. 2).

    loss = mean_groups [ - sum_K q_i log p_i ],  p = softmax_K(L_theta) (over the ``valid`` candidates).
    Gradient w.r.t. the group logscores: (p - q) / n_groups, exactly 0 for a group whose target is
    q = softmax_K(L_old) with L_theta = L_old (no signal, at theta = theta_old). Duplicate candidates
    stay separate entries.
    """
    _check_groups(logscores)
    return _TargetCrossEntropy.apply(logscores, target.detach(), valid)


def group_pg_loss(logscores: torch.Tensor, scores: torch.Tensor, eta: float = 1.0) -> torch.Tensor:
    """Group PG, TPO's same-signal scalar ablation (paper Sec. 3.7).

    loss = - mean_groups sum_K sg(u(s)/eta) * L_theta   (L_theta not renormalised over the group).
    """
    check_scores(scores, logscores)
    _check_groups(logscores)
    weights = standardize(scores.detach()) / eta
    return -(weights * logscores).sum(-1).mean()


#: GRPO's group scales (:func:`grpo_advantages`): name -> (Bessel's correction, eps added to the std).
GRPO_ADVANTAGE_STDS: dict[str, tuple[int, float]] = {"population": (0, 1e-8), "sample": (1, 1e-4)}


def grpo_advantages(scores: torch.Tensor, std: str = "population") -> torch.Tensor:
    """GRPO group advantages over the last axis K: A = (s - mean_K s) / (sigma_K + eps), c = s - mean_K s,

    ``"population"`` (the paper's):  sigma = popstd_K s = sqrt(mean_K c^2),                 eps = 1e-8;
    ``"sample"`` (TRL's ``scale_rewards="group"``): sigma = sqrt(mean_K c^2 * K / (K - 1)),  eps = 1e-4
    (the std with Bessel's correction, as TRL's ``nanstd``).

    A group of equal scores gets A = 0 exactly (its float mean can be a rounding error off the scores
    when K is not a power of two, which eps would otherwise magnify). Raises ``ValueError`` on
    non-finite scores or an unknown ``std``.
    """
    if std not in GRPO_ADVANTAGE_STDS:
        raise ValueError(f"std={std!r}: use one of {', '.join(map(repr, GRPO_ADVANTAGE_STDS))}")
    check_scores(scores)
    correction, eps = GRPO_ADVANTAGE_STDS[std]
    scores = scores.detach()
    centred, sigma = _centred_std(scores, -1, correction)
    equal = (scores == scores[..., :1]).all(-1, keepdim=True)
    return torch.where(equal, 0.0, centred / (sigma + eps))


def _clipped_surrogate(log_ratio: torch.Tensor, advantages: torch.Tensor, clip_range: float) -> torch.Tensor:
    """PPO's clipped surrogate, elementwise (to be maximised): min(rho A, clip(rho, 1 - eps, 1 + eps) A),
    rho = exp(log_ratio)."""
    ratio = log_ratio.exp()
    return torch.min(ratio * advantages, ratio.clamp(1 - clip_range, 1 + clip_range) * advantages)


def grpo_loss(
    logscores: torch.Tensor,
    old_logscores: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float = 0.2,
    beta: float = 0.04,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Clipped GRPO with a k3 KL to the rollout snapshot (paper Sec. 3.4, 3.6).

    lambda = clip(L_theta - sg L_old, -20, 20),  rho = exp(lambda),  kl = exp(-lambda) + lambda - 1,
    loss = - mean_groups sum_K [ min(rho A, clip(rho, 1-eps, 1+eps) A) - beta kl ].
    Per-candidate L is the sequence log-prob (sequence-level) or the token log-prob (token-level).
    ``mask`` (bool ``[...]``, one entry per group; GRPO-masked): only the groups where it is True count,
    and the sum over them is divided by max(1, #True) instead of the number of groups.
    """
    _check_groups(logscores)
    log_ratio = (logscores - old_logscores.detach()).clamp(-20.0, 20.0)
    surrogate = _clipped_surrogate(log_ratio, advantages.detach(), clip_range)
    kl = k3(-log_ratio)
    per_group = (surrogate - beta * kl).sum(-1)
    if mask is None:
        return -per_group.mean()
    return -(per_group * mask).sum() / mask.sum().clamp(min=1)


def dapo_loss(
    token_log_probs: torch.Tensor,
    old_token_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float = 0.2,
    beta: float = 0.0,
    n_tokens: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """GRPO with per-token ratios and one token mean over the batch: TRL's default GRPO loss
    (``GRPOTrainer._compute_loss`` with ``loss_type="dapo"``, ``importance_sampling_level="token"``).

        rho_it = exp(log pi_theta(y_it) - sg log pi_old(y_it))          (per token, not clamped)
        k3_it  = exp(-x_it) + x_it - 1,  x_it = log rho_it               (KL to the rollout snapshot)
        loss   = - sum_{i,t} m_it [ min(rho_it A_i, clip(rho_it, 1-eps, 1+eps) A_i) - beta k3_it ] / n_tokens

    ``token_log_probs`` (with gradient), ``old_token_log_probs`` and the 0/1 ``mask`` are ``[N, T]``, the
    advantages A ``[N]`` (one per completion) or ``[N, T]``. ``n_tokens`` (default sum m, the rows' completion
    tokens) is the count the sum is divided by: a part of a batch passes the whole batch's count (TRL's
    ``num_items_in_batch``), so that the parts' losses add up to the batch's. TRL's ``beta`` is a KL to a
    reference model (``kl_coef`` here); ``beta`` here is :func:`grpo_loss`'s, 0 in TRL's loss.
    """
    for name, tensor in (("old token log-probs", old_token_log_probs), ("mask", mask)):
        if tensor.shape != token_log_probs.shape:
            raise ValueError(f"{name} {tuple(tensor.shape)} must be shaped like the token log-probs "
                             f"{tuple(token_log_probs.shape)}")
    log_ratio = token_log_probs - old_token_log_probs.detach()
    terms = _clipped_surrogate(log_ratio, per_token(advantages.detach(), token_log_probs), clip_range)
    if beta:  # k3 of an unclamped ratio may overflow to inf, which a factor beta = 0 would turn into NaN
        terms = terms - beta * k3(-log_ratio)
    count = mask.sum().clamp(min=1) if n_tokens is None else n_tokens
    return -(terms * mask).sum() / count


def sequence_logscores(
    token_log_probs: torch.Tensor, mask: torch.Tensor, reduction: str = "sum"
) -> torch.Tensor:
    """A completion's log-score from its per-token log-probs ``[N, T]`` and 0/1 ``mask`` ``[N, T]``.

    ``"sum"``:  L = sum_t m_t log pi(y_t | x, y_<t), the sequence log-probability (the token tasks);
    ``"mean"``: L = sum_t m_t log pi(y_t | x, y_<t) / max(1, sum_t m_t), the per-token mean, the
    default for text: summed log-probs of sampled completions differ by tens of nats, which makes the
    group softmax one-hot and the TPO target equal to p_old.
    """
    if reduction not in ("sum", "mean"):
        raise ValueError(f"logscore reduction {reduction!r}: use 'sum' or 'mean'")
    total = (token_log_probs * mask).sum(-1)
    return total if reduction == "sum" else total / mask.sum(-1).clamp(min=1)


# ---------------------------------------------------------------------------------------------------
# Single-sample losses (PPO, DG, REINFORCE, MNIST and tabular bandits)


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


# ---------------------------------------------------------------------------------------------------
# Diagnostics (no gradient)


@torch.no_grad()
def policy_kl(old_log_probs: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
    """Exact KL(pi_old || pi_theta) over the action set (last axis), averaged over the states.

    KL = mean_states sum_a pi_old(a) (log pi_old(a) - log pi_theta(a)); logged as ``train/approx_kl``.
    """
    return (old_log_probs.exp() * (old_log_probs - log_probs)).sum(-1).mean()


def k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 term per sample, exp(x) - x - 1 >= 0, with x = log q - log p for samples of p."""
    return torch.exp(log_ratio) - log_ratio - 1


def k3_kl(log_ratio: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Schulman's k3 estimator of KL(p || q) from samples of p, with x = log q - log p per sample:
    k3 = exp(x) - x - 1 >= 0, averaged over the entries where ``mask`` is 1 (all when None).

    KL(pi_old || pi_theta): x = log pi_theta - log pi_old; KL(pi_theta || pi_ref) (the LLM runs'
    penalty to the frozen reference): x = log pi_ref - log pi_theta.
    """
    terms = k3(log_ratio)
    if mask is None:
        return terms.mean()
    return (terms * mask).sum() / mask.sum().clamp(min=1)


@torch.no_grad()
def group_diagnostics(scores: torch.Tensor) -> dict[str, torch.Tensor]:
    """Fractions of the groups ``[..., K]`` where every candidate failed (no score > 0) and where the
    scores carry no signal (popstd_K s <= 1e-6), the all-fail and zero-variance diagnostics.
    """
    return {
        "all_fail_frac": (~(scores > 0).any(-1)).float().mean(),
        "zero_variance_frac": zero_variance_groups(scores).float().mean(),
    }


@torch.no_grad()
def target_gap(logscores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """mean |p - q| over all candidates, p = softmax_K(L): how far the policy is from the TPO target."""
    return (log_softmax_last(logscores).exp() - target).abs().mean()


@torch.no_grad()
def clip_fraction(logp: torch.Tensor, old_logp: torch.Tensor, clip_range: float = 0.2) -> torch.Tensor:
    """Fraction of entries whose ratio rho = exp(logp - old_logp) lies outside [1 - eps, 1 + eps]."""
    return ((logp - old_logp).exp().sub(1).abs() > clip_range).float().mean()


@torch.no_grad()
def target_mass(weights: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean weight per winning and per losing candidate over the whole batch (paper Sec. 4.2).

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


# ---------------------------------------------------------------------------------------------------
# Completion-level TPO (language models): one implementation for the text mode, TRL and verl


def masked_standardize(scores: torch.Tensor, valid: torch.Tensor, threshold: float = 1e-6) -> torch.Tensor:
    """:func:`standardize` over the valid candidates of each group ``[..., K]``; 0 on the others.

    With V = {i : valid_i}:  c_i = s_i - mean_V s,  sigma = sqrt(mean_V c^2);  u_i = c_i / sigma if
    sigma > threshold else 0, for i in V;  u_i = 0 outside V. Standardisation is affine-invariant, so
    already z-scored scores (verl's advantages) give the same u as the raw scores.
    """
    v = valid.to(scores.dtype)
    n = v.sum(-1, keepdim=True).clamp(min=1)
    centred = (scores - (scores * v).sum(-1, keepdim=True) / n) * v
    sigma = (centred.pow(2).sum(-1, keepdim=True) / n).sqrt()
    return _scaled_where_signal(centred, sigma, threshold)


def masked_log_softmax(logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """log_softmax over the valid entries of the last axis; 0 on the others and in all-invalid groups.

    Invalid entries take no probability mass and receive no gradient (no NaN for an all-invalid group).
    """
    any_valid = valid.any(-1, keepdim=True)
    filled = torch.where(valid, logits, torch.full_like(logits, float("-inf")))
    filled = torch.where(any_valid, filled, torch.zeros_like(logits))
    return torch.log_softmax(filled, -1).masked_fill(~valid, 0.0)


def masked_tpo_loss(
    logscores: torch.Tensor,
    old_logscores: torch.Tensor,
    scores: torch.Tensor,
    valid: torch.Tensor | None = None,
    eta: float = 1.0,
    anchor: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TPO on groups ``[..., K]`` whose candidates may be invalid (paper Sec. 2); returns ``(loss, q)``.

    Over the valid set V of each group (all candidates when ``valid`` is None), with u from
    :func:`masked_standardize` and log p restricted to V (:func:`masked_log_softmax`):

        q_V  = softmax_V( log p_old,V + u / eta )   (no anchor: softmax_V(u / eta)), sg, 0 outside V
        loss = (1 / n_groups) sum_groups [ - sum_{i in V} q_i log p_theta,V(i) ]

    A group with fewer than two valid candidates has q = 0 and contributes nothing (no TPO gradient)
    while still counting in n_groups, so the loss is the same mean over groups whatever drops out.
    With every candidate valid this equals ``tpo_loss(L_theta, tpo_target(L_old, s, eta, anchor))``.
    """
    _check_groups(logscores)
    if valid is None:
        valid = torch.ones_like(logscores, dtype=torch.bool)
    for name, tensor in (("old log-scores", old_logscores), ("scores", scores), ("valid", valid)):
        if tensor.shape != logscores.shape:
            raise ValueError(f"{name} {tuple(tensor.shape)} must be shaped like the log-scores "
                             f"{tuple(logscores.shape)}")
    valid = valid.bool()
    check_scores(torch.where(valid, scores.detach(), torch.zeros_like(scores)))
    logits = masked_standardize(scores.detach(), valid) / eta
    if anchor:  # softmax_V(log p_old,V + u / eta) = softmax_V(L_old + u / eta): log_softmax_V only shifts
        logits = old_logscores.detach() + logits
    usable = valid.sum(-1, keepdim=True) >= 2
    target = (group_softmax(logits, valid) * usable).detach()
    return tpo_loss(logscores, target, valid), target


@torch.no_grad()
def masked_group_diagnostics(
    logscores: torch.Tensor, old_logscores: torch.Tensor, target: torch.Tensor, valid: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Diagnostics of groups ``[..., K]`` over their valid candidates, averaged over the usable groups
    (two or more valid candidates): ``effective_group_size`` exp(H(p_old,V)), ``logscore_spread``
    max_V L_old - min_V L_old, ``mean_abs_p_minus_q`` mean_V |p_theta,V - q|; and over all groups
    ``dropped_frac`` (invalid candidates / all) and ``unusable_group_frac`` (groups with < 2 valid)."""
    valid = valid.bool()
    usable = valid.sum(-1) >= 2
    n_usable = usable.sum().clamp(min=1)
    log_p = masked_log_softmax(old_logscores, valid)
    entropy = -(log_p.exp() * log_p * valid).sum(-1)
    big = torch.finfo(old_logscores.dtype).max
    spread = (old_logscores.masked_fill(~valid, -big).max(-1).values  # -inf where no row is valid
              - old_logscores.masked_fill(~valid, big).min(-1).values).masked_fill(~usable, 0.0)
    gap = ((masked_log_softmax(logscores, valid).exp() - target).abs() * valid).sum(-1)
    gap = gap / valid.sum(-1).clamp(min=1)
    return {
        "effective_group_size": (entropy.exp() * usable).sum() / n_usable,
        "logscore_spread": (spread * usable).sum() / n_usable,
        "mean_abs_p_minus_q": (gap * usable).sum() / n_usable,
        "dropped_frac": (~valid).float().mean(),
        "unusable_group_frac": (~usable).float().mean(),
    }


def completion_logscores(
    token_log_probs: torch.Tensor, mask: torch.Tensor, group_size: int, logscore: str = "mean"
) -> torch.Tensor:
    """Log-scores of ``N = n_groups * K`` completions as groups ``[n_groups, K]`` (rows i*K .. i*K+K-1 are
    group i), in float32 at least: L = ``sequence_logscores(log-probs, mask, logscore)`` computed in
    ``promote_types(dtype, float32)`` (bf16/fp16 log-probs are promoted before any sum)."""
    _check_completion_rows(token_log_probs, mask, group_size)
    return row_logscores(token_log_probs, mask, logscore).reshape(-1, group_size)


def _check_completion_rows(token_log_probs: torch.Tensor, mask: torch.Tensor, group_size: int) -> None:
    """A one-line ``ValueError`` unless log-probs and mask are both ``[N, T]``, N a positive multiple of K."""
    if token_log_probs.dim() != 2 or mask.shape != token_log_probs.shape:
        raise ValueError(f"token log-probs {tuple(token_log_probs.shape)} and mask {tuple(mask.shape)} must "
                         f"both be [N, T]")
    n = token_log_probs.shape[0]
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size={group_size!r}: must be an integer K >= 1")
    if n == 0 or n % group_size:
        raise ValueError(f"{n} completions are not whole groups of K = {group_size} (rows i*K .. i*K+K-1 "
                         f"are group i)")


def completion_tpo_loss(
    token_log_probs: torch.Tensor,
    old_token_log_probs: torch.Tensor,
    mask: torch.Tensor,
    scores: torch.Tensor,
    group_size: int,
    eta: float = 1.0,
    logscore: str = "mean",
    valid: torch.Tensor | None = None,
    anchor: bool = True,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TPO on ``N = n_groups * K`` sampled completions (paper Sec. 2; Sec. 3.8 for language models).

    ``token_log_probs`` (log pi_theta, with gradient), ``old_token_log_probs`` (log pi_old) and the 0/1
    ``mask`` are ``[N, T]``, ``scores`` s ``[N]``, rows i*K .. i*K+K-1 prompt i's group. A row is valid
    when ``valid`` (``[N]``, default all) holds and its mask is not empty; invalid rows (empty, or
    truncated completions whose mask was zeroed) leave the group softmax. In float32 at least:

        L_i  = sum_t m_it log pi(y_it)  (``"sum"``)  or that sum / sum_t m_it  (``"mean"``)
        loss = :func:`masked_tpo_loss` (L_theta, L_old, s, valid, eta)

    Returns ``(loss, stats)``: :func:`masked_group_diagnostics`, ``zero_variance_frac`` (usable groups
    whose valid scores are equal, u = 0 and q = p_old) and ``dropped_rows`` (the count of invalid rows).
    """
    if old_token_log_probs.shape != token_log_probs.shape:
        raise ValueError(f"old token log-probs {tuple(old_token_log_probs.shape)} must be shaped like the "
                         f"token log-probs {tuple(token_log_probs.shape)}")
    _check_completion_rows(token_log_probs, mask, group_size)
    rows_valid = mask.bool().any(-1)
    if valid is not None:
        if valid.shape != rows_valid.shape:
            raise ValueError(f"valid {tuple(valid.shape)} must be one flag per completion, "
                             f"({rows_valid.shape[0]},)")
        rows_valid = rows_valid & valid.bool().to(rows_valid.device)
    return grouped_tpo_loss(row_logscores(token_log_probs, mask, logscore),
                            row_logscores(old_token_log_probs.detach(), mask, logscore),
                            scores, rows_valid, group_size, eta, anchor)


def row_logscores(token_log_probs: torch.Tensor, mask: torch.Tensor, logscore: str = "mean") -> torch.Tensor:
    """Each completion's log-score ``[N]`` in float32 at least: ``sequence_logscores`` of the log-probs
    promoted to ``promote_types(dtype, float32)`` (the step of :func:`completion_tpo_loss` before the
    rows are grouped; a group spanning processes gathers these)."""
    dtype = torch.promote_types(token_log_probs.dtype, torch.float32)
    return sequence_logscores(token_log_probs.to(dtype), mask.to(dtype), logscore)


def grouped_tpo_loss(
    logscores: torch.Tensor,
    old_logscores: torch.Tensor,
    scores: torch.Tensor,
    valid: torch.Tensor,
    group_size: int,
    eta: float = 1.0,
    anchor: bool = True,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """:func:`completion_tpo_loss` from the rows' log-scores ``[N]`` (L_theta, L_old), scores and validity
    flags ``[N]``: rows i*K .. i*K+K-1 are group i; :func:`masked_tpo_loss` and its diagnostics."""
    n = logscores.shape[0]
    for name, tensor in (("old log-scores", old_logscores), ("scores", scores), ("valid", valid)):
        if tensor.shape != (n,):
            raise ValueError(f"{name} {tuple(tensor.shape)} must be one per completion, ({n},)")
    if n == 0 or n % group_size:
        raise ValueError(f"{n} completions are not whole groups of K = {group_size} (rows i*K .. i*K+K-1 "
                         f"are group i)")
    groups = logscores.reshape(-1, group_size)
    old = old_logscores.detach().to(groups.dtype).reshape(-1, group_size)
    groups_valid = valid.bool().reshape(-1, group_size)
    s = scores.detach().to(groups.dtype).reshape(-1, group_size)
    loss, target = masked_tpo_loss(groups, old, s, groups_valid, eta, anchor)
    stats = masked_group_diagnostics(groups.detach(), old, target, groups_valid)
    with torch.no_grad():
        usable = groups_valid.sum(-1) >= 2
        flat = masked_standardize(s, groups_valid).abs().amax(-1) == 0
        stats["zero_variance_frac"] = (flat & usable).float().sum() / usable.sum().clamp(min=1)
        stats["dropped_rows"] = (~groups_valid).sum().to(groups.dtype)
    return loss, stats


def reference_kl_terms(
    ref_token_log_probs: torch.Tensor,
    token_log_probs: torch.Tensor,
    old_token_log_probs: torch.Tensor | None = None,
    bias_correction: bool = False,
) -> torch.Tensor:
    """Per-token k3 terms of KL(pi_theta || pi_ref) ``[N, T]``, with gradient (x = log pi_ref - log pi_theta):

        k_t = exp(x_t) - x_t - 1;   with ``bias_correction`` (TRL's ``use_bias_correction_kl``):
        k_t * exp(log pi_theta - sg log pi_old), the importance weight of samples drawn from pi_old.

    Summing ``terms * mask`` over a part and dividing by the completion-token count of the whole batch
    (not the part's) gives each part its share of one batch-wide token mean, whatever the micro-batching.
    """
    terms = k3(ref_token_log_probs.detach() - token_log_probs)
    if bias_correction:
        if old_token_log_probs is None:
            raise ValueError("bias_correction=True needs the rollout log-probs (old_token_log_probs)")
        terms = terms * torch.exp(token_log_probs - old_token_log_probs.detach())
    return terms
