"""The paper's critic-free PPO (paper Sec. 3.4); Stable-Baselines3's PPO stays available as ``sb3_ppo``.

One sampled episode per context, per-token advantage with the batch-mean baseline at the same
position, A[b,t] = r[b,t] - mean_b r[., t] (no critic, no GAE, no return-to-go), and

    rho = exp(log pi_theta - log pi_old),   loss = - mean_b sum_t min(rho A, clip(rho, 1 - eps, 1 + eps) A).
"""

from __future__ import annotations

from typing import Any

import torch as th

from tpo_agents import checks, losses
from tpo_agents.learn_loop import GroupAlgorithm
from tpo_agents.modes import SampleView


class PPO(GroupAlgorithm):
    """Critic-free clipped PPO with the SB3 API.

    :param clip_range: epsilon of the clipped ratio (a float or an SB3 schedule, e.g. ``lin_0.2``).
    """

    default_mode = "single"
    schedules = ("clip_range",)

    def __init__(self, policy: Any, env: Any, clip_range: float | Any = 0.2, **kwargs: Any) -> None:
        self.clip_range = clip_range
        super().__init__(policy, env, **kwargs)

    def _validate(self) -> None:
        super()._validate()
        checks.check_schedulable("clip_range", self.clip_range)

    def sample_loss(self, view: SampleView, diagnostics: bool = True) -> tuple[th.Tensor, dict]:
        clip_range = self.scheduled("clip_range")
        loss = losses.ppo_loss(view.logp, view.old_logp, view.advantages, clip_range, weights=view.weights)
        if not diagnostics:
            return loss, {}
        return loss, {"clip_fraction": losses.clip_fraction(view.logp.detach(), view.old_logp, clip_range)}
