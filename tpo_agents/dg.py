"""Delightful Gradient: a policy gradient gated by "delight" (paper Sec. 3).

With advantage A (reward minus baseline) and surprisal l = -log pi(a) of the sampled action,

    w = sigmoid(A l / eta),     loss = - mean_b sum_t sg(w A) log pi_theta(a_t).

One optimizer step per batch by default (``n_epochs`` exposes a multi-epoch variant). The exact
update of the multi-context bandit (exact mode) is sum_a pi_old(a) sg(w_a r_a) log pi(a), with
baseline 0 and l = -log(pi(a) + 1e-30).
"""

from __future__ import annotations

from typing import Any

import torch as th

from tpo_agents import checks, losses
from tpo_agents.learn_loop import GroupAlgorithm
from tpo_agents.modes import ExactView, SampleView


class DG(GroupAlgorithm):
    """DG with the SB3 API.

    :param eta: temperature of the gate.
    """

    default_mode = "single"

    def __init__(self, policy: Any, env: Any, eta: float = 1.0, n_epochs: int = 1, **kwargs: Any) -> None:
        self.eta = eta
        super().__init__(policy, env, n_epochs=n_epochs, **kwargs)

    def _validate(self) -> None:
        super()._validate()
        checks.check_positive("eta", self.eta)

    def sample_loss(self, view: SampleView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        loss = losses.dg_loss(view.logp, view.advantages, self.eta, weights=view.weights)
        if not diagnostics:
            return loss, {}
        gated = losses.dg_weights(view.logp, view.advantages, self.eta)
        return loss, {"mean_abs_gated_advantage": gated.abs().mean()}

    def exact_loss(self, view: ExactView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        eps = losses.TABULAR_SURPRISAL_EPS
        loss = losses.dg_loss(view.log_probs, view.rewards, self.eta, eps, weights=view.old_probs)
        if not diagnostics:
            return loss, {}
        gated = view.old_probs * losses.dg_weights(view.log_probs, view.rewards, self.eta, eps)
        return loss, {"mean_abs_gated_advantage": gated.abs().mean()}
