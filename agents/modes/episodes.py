"""The modes that step whole episodes (token, sequence, single): shared interactions and logging."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium.vector import VectorEnv

from tpo_agents.batches import Episodes, TokenGroups
from tpo_agents.modes.base import CollectionMode


class EpisodeMode(CollectionMode):
    """A mode whose batches are episodes of ``T`` steps (``Episodes`` or ``TokenGroups``)."""

    def steps_per_collect(self, env: VectorEnv) -> int:
        return self.n_envs * int(env.unwrapped.task.horizon)

    def rollout_metrics(self, batch: Episodes | TokenGroups) -> dict[str, th.Tensor]:
        """Task error = 1 - mean per-token reward of the behaviour episodes (paper Sec. 3.4), and
        the episode return, success rate (every token right) and length."""
        token_rewards = self.member_rows(batch.token_rewards)
        return {
            "task_error": 1 - token_rewards.flatten(1).mean(1),
            "ep_rew_mean": self.member_rows(batch.returns).mean(1),
            "success_rate": (token_rewards.min(-1).values > 0).float().mean(1),
            "ep_len_mean": th.full((self.n_members,), float(token_rewards.shape[-1]),
                                   device=token_rewards.device),
        }

    def episode_rows(self, batch: Episodes | TokenGroups) -> dict[str, Any]:
        """``r``, ``l``, ``is_success`` and, on the token tasks, ``token_error`` of each episode."""
        token_rewards = batch.token_rewards.cpu().numpy()
        rows: dict[str, Any] = {
            "r": batch.returns.cpu().numpy(),
            "l": np.full(len(token_rewards), token_rewards.shape[-1]),
            "is_success": token_rewards.min(-1) > 0,
        }
        if batch.prompts is not None:
            rows["token_error"] = 1 - token_rewards.mean(-1)
        return rows
