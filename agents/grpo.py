"""GRPO as the paper runs it (spec 2.2, 2.3, 2.5, 11.4).

Grouped modes: A = (s - mean_K s) / (popstd_K s + 1e-8), lambda = clip(L_theta - L_old, +-20),
rho = exp(lambda), kl = exp(-lambda) + lambda - 1 (k3, to the rollout snapshot),

    loss = - mean_groups sum_i [ min(rho A, clip(rho, 1 - eps, 1 + eps) A) - beta kl ].

``mask_zero_variance=True`` is GRPO-masked: groups with equal scores contribute nothing.
Single mode (MNIST, tabular): the same surrogate per sample, with rewards standardised across the
batch (the paper's single-sample "GRPO", a REINFORCE with batch-normalised rewards at one epoch).
Population mode (multi-context bandit): the exact expectation of that update under pi, with
A_a = (r_a - p) / sqrt(p (1 - p) + 1e-8), p = E_pi[r], so the step is sqrt(p / (1 - p)) (e_y - pi).
"""

from __future__ import annotations

from typing import Any

import torch as th

from agents import losses
from agents.base import GroupAlgorithm, group_diagnostics


class GRPO(GroupAlgorithm):
    """GRPO with the SB3 API (token- or sequence-level ratios; single-sample on bandits and MNIST).

    :param beta: weight of the k3 KL to the rollout snapshot (0.04; 0 is "GRPO (no KL)").
    :param clip_range: epsilon of the clipped ratio.
    :param mask_zero_variance: drop zero-variance groups (GRPO-masked).
    """

    group_modes = ("token", "sequence", "single", "population")

    def __init__(
        self,
        policy: Any,
        env: Any,
        beta: float = 0.04,
        clip_range: float = 0.2,
        mask_zero_variance: bool = False,
        **kwargs: Any,
    ) -> None:
        self.beta = beta
        self.clip_range = clip_range
        self.mask_zero_variance = mask_zero_variance
        super().__init__(policy, env, **kwargs)

    def _views(self, batch: Any, log_probs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        if self.group_mode == "single":
            return self.sample_view(batch, log_probs)
        return self.group_view(batch, log_probs)

    def prepare(self, batch: Any) -> dict[str, th.Tensor]:
        if self.group_mode == "population":
            return {"weights": batch.old_log_probs.exp() * population_standardized(batch)}
        old_logscores, scores = self._views(batch, batch.old_log_probs)
        if self.group_mode == "single":
            advantages = losses.batch_standardized_advantages(scores)
            mask = None
        else:
            advantages = losses.grpo_advantages(scores)
            mask = ~losses.zero_variance_groups(scores) if self.mask_zero_variance else None
        return {"old": old_logscores, "advantages": advantages, "scores": scores, "mask": mask}

    def loss(self, batch: Any, frozen: dict[str, th.Tensor], log_probs: th.Tensor) -> tuple[th.Tensor, dict]:
        if self.group_mode == "population":
            return losses.pg_loss(log_probs, frozen["weights"]), {}
        logscores, _ = self._views(batch, log_probs)
        old, advantages = frozen["old"], frozen["advantages"]
        loss = losses.grpo_loss(logscores, old, advantages, self.clip_range, self.beta, frozen["mask"])
        winners, losers = losses.target_mass(advantages.abs(), frozen["scores"])
        stats = {
            "clip_fraction": losses.clip_fraction(logscores.detach(), old, self.clip_range),
            "q_mass_winners": winners,
            "q_mass_losers": losers,
        }
        if self.group_mode != "single":
            stats.update(group_diagnostics(frozen["scores"]))
        return loss, stats


def population_standardized(batch: Any) -> th.Tensor:
    """Rewards standardised under the policy itself: (r - E_pi r) / sqrt(Var_pi r + 1e-8) per context."""
    pi = batch.old_log_probs.exp()
    mean = (pi * batch.rewards).sum(-1, keepdim=True)
    variance = (pi * (batch.rewards - mean).pow(2)).sum(-1, keepdim=True)
    return (batch.rewards - mean) / (variance + 1e-8).sqrt()
