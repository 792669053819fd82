"""Diagnostics of an update, without gradient: KL estimates, group statistics, clip fractions, target mass."""

from __future__ import annotations

import torch

from tpo_agents.layout import log_softmax_last
from tpo_agents.losses.groups import k3, zero_variance_groups


@torch.no_grad()
def policy_kl(old_log_probs: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
    """Exact KL(pi_old || pi_theta) over the action set (last axis), averaged over the states.

    KL = mean_states sum_a pi_old(a) (log pi_old(a) - log pi_theta(a)); logged as ``train/approx_kl``.
    """
    return (old_log_probs.exp() * (old_log_probs - log_probs)).sum(-1).mean()




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
