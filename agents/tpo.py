"""Target Policy Optimization (paper Section 2, spec 1.2-1.3, 2.2-2.5).

For each group of K candidates with log-scores L and raw scores s:

    q = softmax( log_softmax_K(sg L_old) + u(s) / eta )        (the target, frozen for all epochs)
    loss = - mean_groups sum_i q_i log_softmax_K(L_theta)_i     (gradient on the group logits: p - q)

Groups are next-token candidates (``group_mode="token"``), whole episodes (``"sequence"``), the
action set of a context scored from one sampled action (``"single"``: MNIST, tabular), or the exact
action set (``"population"``: the multi-context bandit).
"""

from __future__ import annotations

from typing import Any

import torch as th

from agents import losses
from agents.base import GroupAlgorithm, group_diagnostics


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

    def prepare(self, batch: Any) -> dict[str, th.Tensor]:
        old_logscores, scores = self.group_view(batch, batch.old_log_probs)
        target = losses.tpo_target(old_logscores, scores, eta=self.eta, anchor=self.anchor)
        return {"target": target, "scores": scores}

    def loss(self, batch: Any, frozen: dict[str, th.Tensor], log_probs: th.Tensor) -> tuple[th.Tensor, dict]:
        logscores, _ = self.group_view(batch, log_probs)
        target, scores = frozen["target"], frozen["scores"]
        winners, losers = losses.target_mass(target, scores)
        stats = {
            **group_diagnostics(scores),
            "q_mass_winners": winners,
            "q_mass_losers": losers,
            "mean_abs_p_minus_q": (logscores.detach().log_softmax(-1).exp() - target).abs().mean(),
        }
        return losses.tpo_loss(logscores, target), stats
