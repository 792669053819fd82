"""Policy-gradient baselines: REINFORCE with a baseline (``PG``) and Group PG (``GroupPG``).

PG:        loss = - mean_b sum_t sg(r - b) log pi_theta(a_t)       (spec 2.1, 2.5, 2.6)
           population mode: the exact sum_a pi(a) r_a log pi(a) gradient, i.e. p (e_y - pi).
Group PG:  TPO's same-signal ablation, scalar weights a = sg(u(s) / eta) on each candidate's
           log-score, loss = - mean_groups sum_i a_i L_theta,i (spec 2.2); on MNIST the weight of the
           sampled action is u at that action (+-3, spec 2.5).
"""

from __future__ import annotations

from typing import Any

import torch as th

from agents import losses
from agents.base import GroupAlgorithm


class PG(GroupAlgorithm):
    """REINFORCE with a baseline (batch mean per position, expected sum pi^2, or a constant)."""

    group_modes = ("single", "population")

    def __init__(self, policy: Any, env: Any, n_epochs: int = 1, **kwargs: Any) -> None:
        super().__init__(policy, env, n_epochs=n_epochs, **kwargs)

    def prepare(self, batch: Any) -> dict[str, th.Tensor]:
        if self.group_mode == "population":
            return {"advantages": batch.old_log_probs.exp() * batch.rewards}
        _, rewards = self.sample_view(batch, batch.old_log_probs)
        return {"advantages": self.single_advantages(batch, rewards)}

    def loss(self, batch: Any, frozen: dict[str, th.Tensor], log_probs: th.Tensor) -> tuple[th.Tensor, dict]:
        logp = log_probs if self.group_mode == "population" else self.sample_view(batch, log_probs)[0]
        return losses.pg_loss(logp, frozen["advantages"]), {}


class GroupPG(GroupAlgorithm):
    """Group PG with the SB3 API.

    :param eta: temperature dividing the standardised scores.
    """

    group_modes = ("token", "sequence", "single")

    def __init__(self, policy: Any, env: Any, eta: float = 1.0, **kwargs: Any) -> None:
        self.eta = eta
        super().__init__(policy, env, **kwargs)

    def prepare(self, batch: Any) -> dict[str, th.Tensor]:
        if self.group_mode != "single":
            return {"scores": self.group_view(batch, batch.old_log_probs)[1]}
        rewards = batch.token_rewards.sum(-1)
        n_actions = batch.old_log_probs.shape[-1]
        scores = losses.onehot_scores(batch.actions[:, 0], self.single_advantages(batch, rewards), n_actions)
        u = losses.standardize(scores) / self.eta
        return {"advantages": u.gather(-1, batch.actions[:, :1])}

    def loss(self, batch: Any, frozen: dict[str, th.Tensor], log_probs: th.Tensor) -> tuple[th.Tensor, dict]:
        if self.group_mode == "single":
            logp, _ = self.sample_view(batch, log_probs)
            return losses.pg_loss(logp, frozen["advantages"]), {}
        logscores, _ = self.group_view(batch, log_probs)
        return losses.group_pg_loss(logscores, frozen["scores"], self.eta), {}
