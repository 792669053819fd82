"""The paper's critic-free PPO (spec 2.1, 11.5); Stable-Baselines3's PPO stays available as ``sb3_ppo``.

One sampled episode per context, per-token advantage with the batch-mean baseline at the same
position, A[b,t] = r[b,t] - mean_b r[., t] (no critic, no GAE, no return-to-go), and

    rho = exp(log pi_theta - log pi_old),   loss = - mean_b sum_t min(rho A, clip(rho, 1 - eps, 1 + eps) A).
"""

from __future__ import annotations

from typing import Any

import torch as th

from agents import losses
from agents.base import GroupAlgorithm


class PPO(GroupAlgorithm):
    """Critic-free clipped PPO with the SB3 API.

    :param clip_range: epsilon of the clipped ratio.
    """

    group_modes = ("single",)

    def __init__(self, policy: Any, env: Any, clip_range: float = 0.2, **kwargs: Any) -> None:
        self.clip_range = clip_range
        super().__init__(policy, env, **kwargs)

    def prepare(self, batch: Any) -> dict[str, th.Tensor]:
        old_logp, rewards = self.sample_view(batch, batch.old_log_probs)
        return {"old": old_logp, "advantages": self.single_advantages(batch, rewards)}

    def loss(self, batch: Any, frozen: dict[str, th.Tensor], log_probs: th.Tensor) -> tuple[th.Tensor, dict]:
        logp, _ = self.sample_view(batch, log_probs)
        old, advantages = frozen["old"], frozen["advantages"]
        stats = {"clip_fraction": losses.clip_fraction(logp.detach(), old, self.clip_range)}
        return losses.ppo_loss(logp, old, advantages, self.clip_range), stats
