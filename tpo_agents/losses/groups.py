"""Grouped losses: TPO's target and cross-entropy, GRPO and DAPO's clipped surrogates, Group PG, and the
group primitives they share (shapes: :mod:`tpo_agents.losses`)."""

from __future__ import annotations

from typing import Any

import torch

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


def masked_log_softmax(logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """log_softmax over the valid entries of the last axis; 0 on the others and in all-invalid groups.

    Invalid entries take no probability mass and receive no gradient (no NaN for an all-invalid group).
    """
    any_valid = valid.any(-1, keepdim=True)
    filled = torch.where(valid, logits, torch.full_like(logits, float("-inf")))
    filled = torch.where(any_valid, filled, torch.zeros_like(logits))
    return torch.log_softmax(filled, -1).masked_fill(~valid, 0.0)


def k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 term per sample, exp(x) - x - 1 >= 0, with x = log q - log p for samples of p."""
    return torch.exp(log_ratio) - log_ratio - 1


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
