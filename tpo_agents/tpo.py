"""Target Policy Optimization (paper Sec. 2).

For each group of K candidates with log-scores L and raw scores s:

    q = softmax( log_softmax_K(sg L_old) + u(s) / eta )        (the target, frozen for all epochs)
    loss = - mean_groups sum_i q_i log_softmax_K(L_theta)_i     (gradient on the group logits: p - q)

Groups are next-token candidates (token mode), whole episodes (sequence mode), the action set of a
context scored from one sampled action (single mode: MNIST, tabular), or the exact action set
(exact mode: the multi-context bandit); see ``tpo_agents.modes``.
"""

from __future__ import annotations

from typing import Any

import torch as th

from tpo_agents import checks, losses
from tpo_agents.learn_loop import GroupAlgorithm
from tpo_agents.modes import GroupView


class TPO(GroupAlgorithm):
    """TPO with the SB3 API. ``anchor=False`` is the paper's no-anchor ablation (q = softmax(u/eta)).

    :param eta: temperature eta of the target (1.0 in every experiment).
    :param anchor: keep the log_softmax(L_old) anchor in the target.
    See ``GroupAlgorithm`` for the shared parameters.
    """

    def __init__(self, policy: Any, env: Any, eta: float = 1.0, anchor: bool = True, **kwargs: Any) -> None:
        self.eta = eta
        self.anchor = anchor
        super().__init__(policy, env, **kwargs)

    def _validate(self) -> None:
        super()._validate()
        checks.check_positive("eta", self.eta)
        checks.check_bool("anchor", self.anchor)

    def group_loss(self, view: GroupView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        if view.valid is not None:
            return self._masked_group_loss(view, diagnostics)
        target = losses.tpo_target(view.old_logscores, view.scores, eta=self.eta, anchor=self.anchor)
        if not diagnostics:
            return losses.tpo_loss(view.logscores, target), {}
        winners, losers = losses.target_mass(target, view.scores)
        stats = {
            **losses.group_diagnostics(view.scores),
            "q_mass_winners": winners,
            "q_mass_losers": losers,
            "mean_abs_p_minus_q": losses.target_gap(view.logscores.detach(), target),
        }
        return losses.tpo_loss(view.logscores, target), stats

    def _masked_group_loss(self, view: GroupView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        """TPO over each group's valid candidates (:func:`tpo_agents.losses.masked_tpo_loss`; the function
        the TRL and verl paths reach through :func:`tpo_agents.losses.completion_tpo_loss`)."""
        loss, target = losses.masked_tpo_loss(view.logscores, view.old_logscores, view.scores, view.valid,
                                              self.eta, self.anchor)
        if not diagnostics:
            return loss, {}
        logscores = view.logscores.detach()
        masked = losses.masked_group_diagnostics(logscores, view.old_logscores, target, view.valid)
        winners, losers = losses.target_mass(target, view.scores)
        stats = {
            **losses.group_diagnostics(view.scores),
            "q_mass_winners": winners,
            "q_mass_losers": losers,
            "mean_abs_p_minus_q": masked["mean_abs_p_minus_q"],
            "dropped_rows": (~view.valid).sum(),
        }
        return loss, stats
