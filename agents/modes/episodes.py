"""The modes that step whole episodes (token, sequence, single): shared re-scoring and logging."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium.vector import VectorEnv

from tpo_agents.batches import Episodes, TokenGroups
from tpo_agents.decoding import episode_log_probs
from tpo_agents.modes.base import CollectionMode
from tpo_agents.policies.protocols import ActionPolicy


class EpisodeMode(CollectionMode):
    """A mode whose batches are episodes of ``T`` steps (``Episodes`` or ``TokenGroups``)."""

    def steps_per_collect(self, env: VectorEnv) -> int:
        return self.n_envs * int(env.unwrapped.task.horizon)

    def log_probs(self, policy: ActionPolicy, batch: Episodes | TokenGroups) -> th.Tensor:
        return episode_log_probs(policy, batch)

    @staticmethod
    def rescore_old_policy(policy: ActionPolicy, batch: Episodes | TokenGroups | None) -> Any:
        """Write pi_old into a collected batch as the losses compute log pi_theta: one forward of the
        update's own function at theta_old (the transformer's teacher-forced re-scoring), kept with its
        gradient as the first epoch's log-probs. Sampling decoded with a KV cache, whose log-probs differ
        from the re-scoring by rounding (~1e-7); with pi_old read from the same forward the first epoch
        has L_theta = L_old exactly, so a group without signal has an exactly zero gradient (GRPO's
        ratio is 1, its k3 KL and the TPO gap p - q vanish), as in the paper and the reference code,
        whose sampling and update share one compiled program."""
        if batch is None:
            return None
        log_probs = episode_log_probs(policy, batch)
        batch.old_log_probs = log_probs.detach()
        batch.first_log_probs = log_probs
        return batch

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
