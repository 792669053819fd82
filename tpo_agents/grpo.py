"""GRPO as the paper runs it (paper Sec. 3.3-3.6), and as TRL's ``GRPOTrainer`` runs it by default.

Groups (token, sequence, text mode): A = (s - mean_K s) / (popstd_K s + 1e-8), lambda = clip(L_theta - L_old,
+-20), rho = exp(lambda), kl = exp(-lambda) + lambda - 1 (k3, to the rollout snapshot),

    loss = - mean_groups sum_i [ min(rho A, clip(rho, 1 - eps, 1 + eps) A) - beta kl ].

``mask_zero_variance=True`` is GRPO-masked: groups with equal scores contribute nothing.
``loss_type="dapo"`` and ``advantage_std="sample"`` (text mode) are TRL's defaults: per-token ratios,
one token mean over the batch, and A over the std with Bessel's correction + 1e-4 (:class:`GRPO`).
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
from tpo_agents.modes import MODES, CompletionTokens, ExactView, GroupView, SampleView, View

#: GRPO's losses on groups: the paper's (``"group"``) and TRL's default (``"dapo"``), see :class:`GRPO`.
LOSS_TYPES = ("group", "dapo")


class GRPO(GroupAlgorithm):
    """GRPO with the SB3 API (token- or sequence-level ratios; single-sample on bandits and MNIST).

    :param beta: weight of the k3 KL to the rollout snapshot (0.04; 0 is "GRPO (no KL)"). TRL's ``beta``
        is a KL to a reference model, ``kl_coef`` here.
    :param clip_range: epsilon of the clipped ratio (a float or an SB3 schedule, e.g. ``lin_0.2``).
    :param mask_zero_variance: drop zero-variance groups (GRPO-masked).
    :param loss_type: how the clipped surrogate is formed and averaged, named as TRL's ``loss_type``:

        * ``"group"`` (the paper's): one ratio per candidate of the group view, rho_i = exp(L_theta,i -
          L_old,i) with L the candidate's log-score (text mode: the completion's ``logscore``, by default the
          mean of its token log-probs, so a sequence-level ratio), and
          loss = - mean_groups sum_i [ min(rho_i A_i, clip(rho_i, 1-eps, 1+eps) A_i) - beta k3_i ]
          (:func:`~tpo_agents.losses.grpo_loss`);
        * ``"dapo"`` (TRL's default; text mode, one member): one ratio per completion token,
          rho_it = exp(log pi_theta(y_it) - log pi_old(y_it)), and
          loss = - sum_{i,t} m_it [ min(rho_it A_i, clip(rho_it, 1-eps, 1+eps) A_i) - beta k3_it ] / sum m,
          the sum over every completion token of the batch divided by the batch's completion tokens,
          whatever the micro-batch size (:func:`~tpo_agents.losses.dapo_loss`). Not with
          ``mask_zero_variance``.
    :param advantage_std: the scale of the group advantages A_i = (s_i - mean_K s) / (sigma + eps)
        (:func:`~tpo_agents.losses.grpo_advantages`): ``"population"`` (the paper's) sigma = popstd_K s,
        eps = 1e-8; ``"sample"`` (TRL's ``scale_rewards="group"``) sigma = the std with Bessel's
        correction, sqrt(sum_K (s - mean_K s)^2 / (K - 1)), eps = 1e-4. Group losses only (token,
        sequence, text mode); the single and exact modes standardise their own way.

    TRL 1.16's ``GRPOTrainer`` defaults read here ``loss_type="dapo"``, ``advantage_std="sample"``,
    ``beta=0.0``, ``clip_range=0.2``, ``n_epochs=1``, ``max_grad_norm=1.0`` and a learning rate of 1e-6
    decaying linearly to 0 (the zoo's ``lin_1e-6``); docs/llm.md, "GRPO as TRL runs it", lists the rest.
    """

    schedules = ("clip_range",)
    later_hyperparameters = frozenset({"loss_type", "advantage_std"})

    def __init__(
        self,
        policy: Any,
        env: Any,
        beta: float = 0.04,
        clip_range: float | Any = 0.2,
        mask_zero_variance: bool = False,
        loss_type: str = "group",
        advantage_std: str = "population",
        **kwargs: Any,
    ) -> None:
        self.beta = beta
        self.clip_range = clip_range
        self.mask_zero_variance = mask_zero_variance
        self.loss_type = loss_type
        self.advantage_std = advantage_std
        super().__init__(policy, env, **kwargs)

    def _validate(self) -> None:
        super()._validate()
        checks.check_nonnegative("beta", self.beta)
        checks.check_schedulable("clip_range", self.clip_range)
        checks.check_bool("mask_zero_variance", self.mask_zero_variance)
        checks.check_choice("loss_type", self.loss_type, LOSS_TYPES)
        checks.check_choice("advantage_std", self.advantage_std, losses.GRPO_ADVANTAGE_STDS)
        if self.advantage_std != "population" and self.loss_view() != "group":
            raise checks.HyperparameterError("advantage_std", self.advantage_std, "'population' in "
                                             f"{self.group_mode} mode (it scales group advantages)")
        if self.loss_type == "dapo":
            if not MODES[self.group_mode].has_completion_tokens:
                raise checks.HyperparameterError("loss_type", "dapo", f"'group' in {self.group_mode} mode (a "
                                                 "token-level loss needs completions' tokens: text mode)")
            if self.n_seeds > 1 or self.mask_zero_variance:
                raise checks.HyperparameterError("loss_type", "dapo", "'group' with n_seeds > 1 or "
                                                 "mask_zero_variance=True")

    def _clipped(self, view: View, logscores: th.Tensor, old: th.Tensor, advantages: th.Tensor,
                 scores: th.Tensor, diagnostics: bool,
                 mask: th.Tensor | None = None) -> tuple[th.Tensor, dict]:
        clip_range = self.scheduled("clip_range")
        if mask is None:
            loss = losses.grpo_loss(logscores, old, advantages, clip_range, self.beta)
        else:  # the kept groups are counted per member

            def masked(logscores: th.Tensor, old: th.Tensor, adv: th.Tensor, mask: th.Tensor) -> th.Tensor:
                return losses.grpo_loss(logscores, old, adv, clip_range, self.beta, mask).reshape(1)

            loss = view.per_member(masked, logscores, old, advantages, mask).mean()
        return loss, self._stats(logscores, old, advantages, scores, clip_range, diagnostics)

    def _token_clipped(self, tokens: CompletionTokens, advantages: th.Tensor, scores: th.Tensor,
                       diagnostics: bool) -> tuple[th.Tensor, dict]:
        """:func:`~tpo_agents.losses.dapo_loss` of the completions' tokens, A_i per completion."""
        clip_range = self.scheduled("clip_range")
        loss = losses.dapo_loss(tokens.log_probs, tokens.old_log_probs, advantages.reshape(-1), tokens.mask,
                                clip_range, self.beta, tokens.n_tokens)
        active = tokens.mask.bool()  # the ratios of the completion tokens, for clip_fraction
        return loss, self._stats(tokens.log_probs[active], tokens.old_log_probs[active], advantages, scores,
                                 clip_range, diagnostics)

    @staticmethod
    def _stats(logp: th.Tensor, old: th.Tensor, advantages: th.Tensor, scores: th.Tensor,
               clip_range: float, diagnostics: bool) -> dict:
        """``clip_fraction`` of the ratios exp(logp - old) and the |A| mass on winners and losers."""
        if not diagnostics:
            return {}
        winners, losers = losses.target_mass(advantages.abs(), scores)
        return {
            "clip_fraction": losses.clip_fraction(logp.detach(), old, clip_range),
            "q_mass_winners": winners,
            "q_mass_losers": losers,
        }

    def group_loss(self, view: GroupView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        advantages = losses.grpo_advantages(view.scores, self.advantage_std)
        if self.loss_type == "dapo":  # a mode whose group view has tokens (checked at construction)
            loss, stats = self._token_clipped(view.tokens, advantages, view.scores, diagnostics)
        else:
            mask = ~losses.zero_variance_groups(view.scores) if self.mask_zero_variance else None
            loss, stats = self._clipped(view, view.logscores, view.old_logscores, advantages, view.scores,
                                        diagnostics, mask)
        if not diagnostics:
            return loss, stats
        return loss, {**stats, **losses.group_diagnostics(view.scores)}

    def sample_loss(self, view: SampleView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        advantages = view.per_member(losses.batch_standardized_advantages, view.rewards)
        return self._clipped(view, view.logp, view.old_logp, advantages, view.rewards, diagnostics)

    def exact_loss(self, view: ExactView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        advantages = losses.policy_standardized_advantages(view.old_log_probs, view.rewards)
        return losses.pg_loss(view.log_probs, advantages, weights=view.old_probs), {}
