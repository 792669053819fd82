"""GRPO as the paper runs it (paper Sec. 3.3-3.6).

Groups (token, sequence mode): A = (s - mean_K s) / (popstd_K s + 1e-8), lambda = clip(L_theta - L_old,
+-20), rho = exp(lambda), kl = exp(-lambda) + lambda - 1 (k3, to the rollout snapshot),

    loss = - mean_groups sum_i [ min(rho A, clip(rho, 1 - eps, 1 + eps) A) - beta kl ].

``mask_zero_variance=True`` is GRPO-masked: groups with equal scores contribute nothing.
Samples (single mode: MNIST, tabular): the same surrogate per sample, with rewards standardised
across the batch (the paper's single-sample "GRPO", a REINFORCE with batch-normalised rewards).
Exact (exact mode, the multi-context bandit): the expectation of that update under pi,
A_a = (r_a - p) / sqrt(p (1 - p) + 1e-8), p = E_pi[r], so the step is sqrt(p / (1 - p)) (e_y - pi).
"""

from __future__ import annotations

from typing import Any

import torch as th

from tpo_agents import checks, losses
from tpo_agents.learn_loop import GroupAlgorithm
from tpo_agents.modes import ExactView, GroupView, SampleView


class GRPO(GroupAlgorithm):
    """GRPO with the SB3 API (token- or sequence-level ratios; single-sample on bandits and MNIST).

    :param beta: weight of the k3 KL to the rollout snapshot (0.04; 0 is "GRPO (no KL)").
    :param clip_range: epsilon of the clipped ratio (a float or an SB3 schedule, e.g. ``lin_0.2``).
    :param mask_zero_variance: drop zero-variance groups (GRPO-masked).
    """

    schedules = ("clip_range",)

    def __init__(
        self,
        policy: Any,
        env: Any,
        beta: float = 0.04,
        clip_range: float | Any = 0.2,
        mask_zero_variance: bool = False,
        **kwargs: Any,
    ) -> None:
        self.beta = beta
        self.clip_range = clip_range
        self.mask_zero_variance = mask_zero_variance
        super().__init__(policy, env, **kwargs)

    def _validate(self) -> None:
        super()._validate()
        checks.check_nonnegative("beta", self.beta)
        checks.check_schedulable("clip_range", self.clip_range)
        checks.check_bool("mask_zero_variance", self.mask_zero_variance)

    def _clipped(self, logscores: th.Tensor, old: th.Tensor, advantages: th.Tensor, scores: th.Tensor,
                 mask: th.Tensor | None = None) -> tuple[th.Tensor, dict]:
        clip_range = self.scheduled("clip_range")
        if mask is None:
            loss = losses.grpo_loss(logscores, old, advantages, clip_range, self.beta)
        else:  # the kept groups are counted per member

            def masked(logscores: th.Tensor, old: th.Tensor, adv: th.Tensor, mask: th.Tensor) -> th.Tensor:
                return losses.grpo_loss(logscores, old, adv, clip_range, self.beta, mask).reshape(1)

            loss = self.mode.per_member(masked, logscores, old, advantages, mask).mean()
        if not self.diagnostics:
            return loss, {}
        winners, losers = losses.target_mass(advantages.abs(), scores)
        stats = {
            "clip_fraction": losses.clip_fraction(logscores.detach(), old, clip_range),
            "q_mass_winners": winners,
            "q_mass_losers": losers,
        }
        return loss, stats

    def group_loss(self, view: GroupView) -> tuple[th.Tensor, dict]:
        mask = ~losses.zero_variance_groups(view.scores) if self.mask_zero_variance else None
        advantages = losses.grpo_advantages(view.scores)
        loss, stats = self._clipped(view.logscores, view.old_logscores, advantages, view.scores, mask)
        if not self.diagnostics:
            return loss, stats
        return loss, {**stats, **losses.group_diagnostics(view.scores)}

    def sample_loss(self, view: SampleView) -> tuple[th.Tensor, dict]:
        advantages = self.mode.per_member(losses.batch_standardized_advantages, view.rewards)
        return self._clipped(view.logp, view.old_logp, advantages, view.rewards)

    def exact_loss(self, view: ExactView) -> tuple[th.Tensor, dict]:
        advantages = losses.policy_standardized_advantages(view.old_log_probs, view.rewards)
        return losses.pg_loss(view.log_probs, advantages, weights=view.old_probs), {}
