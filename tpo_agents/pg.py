"""Policy-gradient baselines: REINFORCE with a baseline (``PG``) and Group PG (``GroupPG``).

PG:        loss = - mean_b sum_t sg(r - b) log pi_theta(a_t)       (paper Sec. 3.1-3.3)
           exact (exact mode): sum_a pi_old(a) r_a log pi(a), i.e. the step p (e_y - pi).
Group PG:  TPO's same-signal ablation, scalar weights a = sg(u(s) / eta) on each candidate's
           log-score, loss = - mean_groups sum_i a_i L_theta,i (paper Sec. 3.7); with one sample
           (MNIST) the weight of the sampled action is u at that action of s = A onehot(a) (+-3).
"""

from __future__ import annotations

from typing import Any

import torch as th

from tpo_agents import checks, losses
from tpo_agents.learn_loop import GroupAlgorithm
from tpo_agents.modes import ExactView, GroupView, SampleView


class PG(GroupAlgorithm):
    """REINFORCE with a baseline (batch mean per position, expected sum pi^2, or a constant)."""

    default_mode = "single"

    def __init__(self, policy: Any, env: Any, n_epochs: int = 1, **kwargs: Any) -> None:
        super().__init__(policy, env, n_epochs=n_epochs, **kwargs)

    def sample_loss(self, view: SampleView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        return losses.pg_loss(view.logp, view.advantages, weights=view.weights), {}

    def exact_loss(self, view: ExactView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        return losses.pg_loss(view.log_probs, view.rewards, weights=view.old_probs), {}


class GroupPG(GroupAlgorithm):
    """Group PG with the SB3 API. Without ``group_mode`` it takes TPO's modes, except ``single`` on the
    multi-context bandit (the zoo's setting: the paper defines no exact update for it).

    :param eta: temperature dividing the standardised scores.
    """

    mode_preference = ("text", "multiturn", "token", "sequence", "single", "exact")

    def __init__(self, policy: Any, env: Any, eta: float = 1.0, **kwargs: Any) -> None:
        self.eta = eta
        super().__init__(policy, env, **kwargs)

    def _validate(self) -> None:
        super()._validate()
        checks.check_positive("eta", self.eta)

    def group_loss(self, view: GroupView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        return losses.group_pg_loss(view.logscores, view.scores, self.eta), {}

    def sample_loss(self, view: SampleView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        first = view.actions[:, 0]
        u = losses.standardize(losses.onehot_scores(first, view.sequence_advantages, view.n_actions))
        sampled_u = u.gather(-1, first.unsqueeze(-1)).squeeze(-1) / self.eta
        return losses.pg_loss(view.logp, sampled_u, weights=view.weights), {}
