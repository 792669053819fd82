"""Sequence mode (terminal or any episodic reward): K whole episodes from one shared context."""

from __future__ import annotations

import torch as th
from gymnasium.vector import VectorEnv

from tpo_agents import losses
from tpo_agents.modes.base import EnvTraits, GroupView, StepHook
from tpo_agents.modes.episodes import EpisodeMode, Episodes, collect_episodes
from tpo_agents.policies.protocols import ActionPolicy


class SequenceMode(EpisodeMode):
    """B contexts x K episodes; blocks of K sub-envs share a context (paper Sec. 3.6).

    Group view: L[b,i] = sum_t log pi(y_{i,t} | x_b, y_{i,<t}), s[b,i] = mean_t r[b,i,t], ``[B, K]``.
    """

    name = "sequence"
    views = ("group",)

    @classmethod
    def is_natural_for(cls, traits: EnvTraits) -> bool:
        """Episodes of several steps (the token tasks; after ``token`` where the reward is dense)."""
        return traits.horizon > 1

    @classmethod
    def min_group_size(cls, view: str) -> int:
        return 2

    @property
    def n_envs(self) -> int:
        return self.batch_size * self.group_size

    def collect(self, env: VectorEnv, policy: ActionPolicy, on_step: StepHook) -> Episodes | None:
        return collect_episodes(env, policy, self.group_size, on_step)

    @staticmethod
    def group_scores(batch: Episodes) -> th.Tensor:
        """s[b, i] = mean_t r[b, i, t], ``[B, K]``."""
        return batch.token_rewards.mean(-1).reshape(batch.n_contexts, batch.group_size)

    def has_signal(self, batch: Episodes, view: str) -> bool:
        return not bool(losses.zero_variance_groups(self.group_scores(batch)).all())

    def group_view(self, batch: Episodes, log_probs: th.Tensor) -> GroupView:
        shape = (batch.n_contexts, batch.group_size)

        def sequence_logscores(step_log_probs: th.Tensor) -> th.Tensor:
            taken = step_log_probs.gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)
            return taken.sum(-1).reshape(shape)

        return GroupView(
            sequence_logscores(log_probs),
            sequence_logscores(batch.old_log_probs),
            self.group_scores(batch),
        )
