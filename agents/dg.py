"""Delightful Gradient (spec 1.4, 2.1, 2.5, 2.6): a policy gradient gated by "delight".

With advantage A (reward minus baseline) and surprisal l = -log pi(a) of the sampled action,

    w = sigmoid(A l / eta),     loss = - mean_b sum_t sg(w A) log pi_theta(a_t).

One optimizer step per batch by default (the reference hard-codes it; ``n_epochs`` exposes App. E's
4-epoch variant). Population mode is the exact update of the multi-context bandit:
sum_a pi(a) sg(w_a r_a) log pi(a), with baseline 0 (spec 2.6, item 23).
"""

from __future__ import annotations

from typing import Any

import torch as th

from agents import losses
from agents.base import GroupAlgorithm

TABULAR_SURPRISAL_EPS = 1e-30


class DG(GroupAlgorithm):
    """DG with the SB3 API.

    :param eta: temperature of the gate.
    """

    group_modes = ("single", "population")

    def __init__(self, policy: Any, env: Any, eta: float = 1.0, n_epochs: int = 1, **kwargs: Any) -> None:
        self.eta = eta
        super().__init__(policy, env, n_epochs=n_epochs, **kwargs)

    def prepare(self, batch: Any) -> dict[str, th.Tensor]:
        if self.group_mode == "population":
            return {"advantages": batch.rewards}
        _, rewards = self.sample_view(batch, batch.old_log_probs)
        return {"advantages": self.single_advantages(batch, rewards)}

    def loss(self, batch: Any, frozen: dict[str, th.Tensor], log_probs: th.Tensor) -> tuple[th.Tensor, dict]:
        advantages = frozen["advantages"]
        if self.group_mode == "population":
            surprisal = -th.log(log_probs.detach().exp() + TABULAR_SURPRISAL_EPS)
            gate = losses.dg_gate(advantages, surprisal, self.eta)
            weights = batch.old_log_probs.exp() * gate * advantages
            return losses.pg_loss(log_probs, weights), {"mean_abs_gated_advantage": weights.abs().mean()}
        logp, _ = self.sample_view(batch, log_probs)
        gate = losses.dg_gate(advantages, -logp.detach(), self.eta)
        stats = {"mean_abs_gated_advantage": (gate * advantages).abs().mean()}
        return losses.dg_loss(logp, advantages, self.eta), stats
