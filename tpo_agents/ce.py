"""The supervised cross-entropy oracle (paper Sec. 3.1-3.3): the target every RL method chases.

The env scores every action at each context; the correct action y = argmax_a r(a) is the label,

    loss = - mean_n log pi_theta(y_n | x_n).

It runs in exact mode only: all contexts of a tabular env, or ``batch_size`` drawn contexts
(MNIST images) per update.
"""

from __future__ import annotations

from typing import Any

import torch as th

from tpo_agents import layout, losses
from tpo_agents.learn_loop import GroupAlgorithm
from tpo_agents.modes import ExactView


class CE(GroupAlgorithm):
    """Cross-entropy on the env's correct actions, with the SB3 API (an oracle, not an RL method)."""

    default_mode = "exact"

    def __init__(self, policy: Any, env: Any, n_epochs: int = 1, **kwargs: Any) -> None:
        super().__init__(policy, env, n_epochs=n_epochs, **kwargs)

    def exact_loss(self, view: ExactView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        return losses.ce_loss(view.log_probs, layout.argmax_last(view.rewards)), {}
