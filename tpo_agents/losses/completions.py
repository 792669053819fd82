"""Completion-level TPO for language models: one implementation for the text mode, TRL and verl (valid
candidates of groups of completions, token log-probs to log-scores, the reference KL)."""

from __future__ import annotations

import torch

from tpo_agents.losses.groups import (
    _check_groups,
    _scaled_where_signal,
    check_scores,
    group_softmax,
    k3,
    masked_log_softmax,
    sequence_logscores,
    tpo_loss,
)


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
