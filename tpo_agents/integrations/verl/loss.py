"""verl's advantage estimator and policy loss ``"tpo"`` (paper Sec. 2), on :mod:`tpo_agents.losses`.

* estimator: u = standardize(s) within the rows sharing a ``uid`` (population std, u = 0 for a
  zero-variance group), written on every response token (``advantages = returns = u_i * m_i``);
* loss: rows ``[j*K, (j+1)*K)`` of a micro-batch are group j; :func:`tpo_agents.losses.completion_tpo_loss`
  on ``log_prob`` (L_theta), ``old_log_prob`` (L_old), ``response_mask`` and the rows' u, scaled by
  D * G_m / G so that verl's sum over micro-batches and mean over ranks is the mean over all G groups of
  the mini-batch. Rows without response tokens leave their group's softmax.

Each process warns once when, from the :data:`WARN_AFTER_CALLS`-th loss call on, more than half of its calls
so far had no signal (every group of equal scores, or no group of two responses with tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tpo_agents.losses import completion_tpo_loss, standardize
from tpo_agents.without_signal import StepsWithoutSignal, loss_signal

from .settings import cfg, tpo_settings

__all__ = ["CALLS_WITHOUT_SIGNAL", "GROUP_TOLERANCE", "LAYOUT_HINT", "WARN_AFTER_CALLS",
           "compute_tpo_advantage", "compute_tpo_policy_loss", "contiguous_groups", "row_advantages"]

#: How far a group's advantages may be from a z-score (mean 0, popstd 0 or 1) before the loss refuses them.
GROUP_TOLERANCE = 1e-3
LAYOUT_HINT = ("use algorithm.adv_estimator=tpo with trainer.use_v1=false, trainer.balance_batch=false, "
               "actor.use_dynamic_bsz=false, actor.shuffle=false")
#: Loss calls (micro-batches) of a process before it may warn that most of them had no signal.
WARN_AFTER_CALLS = 10
#: This process's loss calls without signal.
CALLS_WITHOUT_SIGNAL = StepsWithoutSignal(
    "tpo loss calls (micro-batches) of this process", "actor/tpo_zero_variance_frac = 1",
    "check the rollout's responses and data.max_response_length (actor/tpo_dropped_rows counts the rows)",
)


def compute_tpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Sequence[Any] | np.ndarray | None = None,
    **unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator ``"tpo"``: within-group standardised scores (paper Sec. 2, App. A).

    s_i = sum_t r_{i,t};  u = standardize(s) over the rows sharing a uid ``index`` (population std,
    u = 0 for a zero-variance group, :func:`tpo_agents.losses.standardize`);  A_{i,t} = u_i m_{i,t}.
    Returns ``(advantages, returns)``, both ``A`` ``[N, T]``. Groups are found by uid, so the row
    order does not matter here (the loss needs contiguous groups). ``config`` (verl's
    ``AlgoConfig``) and other keywords verl passes (``reward_baselines``) are not used.
    """
    if index is None:
        raise ValueError("the tpo estimator needs the prompt uid of every row (index=None): verl passes "
                         "non_tensor_batch['uid']")
    if token_level_rewards.dim() != 2 or response_mask.shape != token_level_rewards.shape:
        raise ValueError(f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
                         f"{tuple(response_mask.shape)} must both be [N, T]")
    uids = np.asarray(index, dtype=object)
    n_rows = token_level_rewards.shape[0]
    if uids.shape != (n_rows,):
        raise ValueError(f"index has shape {uids.shape}; expected one uid per row, ({n_rows},)")
    with torch.no_grad():
        scores = token_level_rewards.sum(-1)
        _, inverse, counts = np.unique(uids.astype(str), return_inverse=True, return_counts=True)
        order = np.argsort(inverse, kind="stable")
        u = torch.zeros_like(scores)
        for rows in np.split(order, np.cumsum(counts)[:-1]):
            rows_t = torch.as_tensor(rows, device=scores.device)
            u[rows_t] = standardize(scores[rows_t].unsqueeze(0)).squeeze(0)
        advantages = u.unsqueeze(-1) * response_mask.to(u.dtype)
    return advantages, advantages


def contiguous_groups(values: torch.Tensor, group_size: int, name: str = "rows") -> torch.Tensor:
    """Per-row values ``[N]`` as groups ``[N / K, K]`` of K contiguous rows (row j*K + i is candidate i
    of group j). Raises a one-line ``ValueError`` when N is not a positive multiple of K."""
    n_rows = values.shape[0]
    if values.dim() != 1:
        raise ValueError(f"{name} must be one value per row [N], got shape {tuple(values.shape)}")
    if n_rows == 0 or n_rows % group_size:
        raise ValueError(f"{name}: {n_rows} rows is not a positive multiple of rollout_n={group_size}: every "
                         f"micro-batch must hold whole groups (ppo_micro_batch_size_per_gpu a multiple of "
                         f"{group_size})")
    return values.reshape(n_rows // group_size, group_size)


def row_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's advantage u_i ``[N]``: the value at its first response token (the estimator writes
    the same u_i on every response token), 0 for a row without response tokens."""
    if advantages.shape != response_mask.shape or advantages.dim() != 2:
        raise ValueError(f"advantages {tuple(advantages.shape)} and response_mask "
                         f"{tuple(response_mask.shape)} must both be [N, T]")
    mask = response_mask.bool()
    first = mask.to(torch.int8).argmax(-1, keepdim=True)
    u = advantages.detach().gather(-1, first).squeeze(-1)
    return torch.where(mask.any(-1), u, torch.zeros_like(u))


def _check_standardized(u: torch.Tensor, group_size: int, kept: torch.Tensor | None = None) -> None:
    """Refuse groups ``[G, K]`` of advantages that are not z-scores: mixed rows or another estimator.

    ``kept`` (``[G_all]`` bool): which groups of the micro-batch ``u`` holds (those without an empty row,
    whose u is not written on any token), for the row numbers of the message."""
    mean = u.mean(-1)
    std = (u - mean.unsqueeze(-1)).pow(2).mean(-1).sqrt()
    bad = (mean.abs() > GROUP_TOLERANCE) | ((std > GROUP_TOLERANCE) & ((std - 1).abs() > GROUP_TOLERANCE))
    if bad.any():
        j = int(bad.nonzero()[0, 0])
        if kept is not None:
            j = int(kept.nonzero()[j, 0])
        mean, std = mean[bad], std[bad]
        raise ValueError(
            f"rows {j * group_size}..{(j + 1) * group_size - 1} of the micro-batch are not one z-scored "
            f"group of rollout_n={group_size} (advantage mean {float(mean[0]):.4g}, population std "
            f"{float(std[0]):.4g}; expected 0 and 0 or 1): {LAYOUT_HINT}")


def _check_actor_config(config: Any, group_size: int) -> None:
    """The actor settings that keep groups whole, read from verl's ``ActorConfig`` at each call."""
    if cfg(config, "use_dynamic_bsz", False):
        raise ValueError("actor.use_dynamic_bsz=True regroups rows by length: the tpo loss needs False")
    if cfg(config, "shuffle", False):
        raise ValueError("actor.shuffle=True shuffles rows across groups: the tpo loss needs False")
    micro = cfg(config, "ppo_micro_batch_size_per_gpu", None)
    if micro is not None and int(micro) % group_size:
        raise ValueError(f"actor.ppo_micro_batch_size_per_gpu={micro} is not a multiple of "
                         f"rollout_n={group_size}")


def _group_size(config: Any) -> int:
    k = cfg(config, "rollout_n", None)
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 2:
        raise ValueError(f"rollout_n={k!r}: the tpo loss needs actor_rollout_ref.rollout.n >= 2 completions "
                         f"per prompt")
    return int(k)


def _global_scale(config: Any, n_local_groups: int, group_size: int) -> float:
    """D * G_m / G: turns the micro-batch's group mean into its share of the mean over all G groups."""
    info = cfg(config, "global_batch_info", None) or {}
    dp_size = int(info.get("dp_size") or 1)
    global_rows = info.get("global_batch_size")
    if global_rows is None:
        if dp_size > 1:
            raise ValueError(f"global_batch_info has dp_size={dp_size} but no global_batch_size: the tpo "
                             f"loss cannot normalise over all groups")
        return 1.0
    global_rows = int(global_rows)
    if global_rows <= 0 or global_rows % group_size:
        raise ValueError(f"global_batch_size={global_rows} rows is not a positive multiple of rollout_n="
                         f"{group_size}")
    return n_local_groups * dp_size / (global_rows // group_size)


def compute_tpo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl policy loss ``"tpo"``: the TPO cross-entropy on contiguous groups (paper Sec. 2, Eqs. 2-3).

    Rows ``[j*K, (j+1)*K)`` of the micro-batch are group j, K = ``config.rollout_n``; u_i = the row's
    advantage (the ``"tpo"`` estimator's z-score); with eta and the log-score reduction from
    ``config.policy_loss`` (:func:`~tpo_agents.integrations.verl.settings.tpo_settings`),

        CE_m = :func:`tpo_agents.losses.completion_tpo_loss` (log_prob, old_log_prob, response_mask, u, K,
        eta)
        loss = CE_m * D * G_m / G,

    the mean over the micro-batch's G_m groups turned into its share of the mean over all G groups of
    the optimizer step (D = ``global_batch_info["dp_size"]``, G = ``global_batch_size`` / K); without
    ``global_batch_size`` the loss is the micro-batch's mean. A row without response tokens leaves its
    group's softmax (u is re-standardised over the remaining rows, which standardisation's affine
    invariance makes equal to standardising the raw scores); a group with fewer than two such rows gives
    no gradient. ``loss_agg_mode`` is ignored (the loss is per group, not per token). Metrics (means over
    the micro-batch): ``actor/tpo_effective_group_size``, ``actor/tpo_logscore_spread``,
    ``actor/tpo_target_gap``, ``actor/tpo_zero_variance_frac``, ``actor/tpo_dropped_rows``,
    ``actor/ppo_kl`` (mean of log pi_old - log pi_theta over response tokens) and ``actor/tpo_eta``; each
    finite when a group has no response tokens at all. Counted in :data:`CALLS_WITHOUT_SIGNAL`, which warns
    once when most calls had no signal.
    """
    if config is None:
        raise ValueError("the tpo loss needs verl's actor config (config=None): it reads rollout_n and "
                         "global_batch_info")
    if rollout_is_weights is not None:
        raise ValueError("rollout_is_weights were passed: the tpo loss has no importance-weighted form; set "
                         "algorithm.rollout_correction.rollout_is=null")
    for name, tensor in (("old_log_prob", old_log_prob), ("advantages", advantages),
                         ("response_mask", response_mask)):
        if tensor.shape != log_prob.shape:
            raise ValueError(f"{name} {tuple(tensor.shape)} must be shaped like log_prob "
                             f"{tuple(log_prob.shape)}")
    group_size = _group_size(config)
    _check_actor_config(config, group_size)
    eta, reduction = tpo_settings(config)
    contiguous_groups(log_prob[:, 0], group_size, "log_prob")
    u = row_advantages(advantages, response_mask).float()
    whole = contiguous_groups(response_mask.bool().any(-1), group_size, "response_mask").all(-1)
    _check_standardized(contiguous_groups(u, group_size, "advantages")[whole], group_size, whole)

    loss, stats = completion_tpo_loss(log_prob, old_log_prob, response_mask, u, group_size, eta, reduction)
    loss = loss * _global_scale(config, log_prob.shape[0] // group_size, group_size)
    CALLS_WITHOUT_SIGNAL.add(*loss_signal(stats))
    CALLS_WITHOUT_SIGNAL.warn(min_steps=WARN_AFTER_CALLS)
    with torch.no_grad():
        mask = response_mask.float()
        log_ratio = old_log_prob.float() - log_prob.detach().float()
        metrics = {
            "actor/tpo_effective_group_size": stats["effective_group_size"].item(),
            "actor/tpo_logscore_spread": stats["logscore_spread"].item(),
            "actor/tpo_target_gap": stats["mean_abs_p_minus_q"].item(),
            "actor/tpo_zero_variance_frac": stats["zero_variance_frac"].item(),
            "actor/tpo_dropped_rows": stats["dropped_rows"].item(),
            "actor/ppo_kl": ((log_ratio * mask).sum() / mask.sum().clamp(min=1)).item(),
            "actor/tpo_eta": eta,
        }
    return loss, metrics
