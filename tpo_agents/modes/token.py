"""Token mode (dense reward): K next-token candidates at every prefix, scored by the env without stepping."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch as th
from gymnasium.vector import VectorEnv

from tpo_agents import losses
from tpo_agents.modes.base import EnvTraits, GroupView, StepHook
from tpo_agents.modes.episodes import EpisodeMode
from tpo_agents.policies.decoding import episode_log_probs
from tpo_agents.policies.protocols import ActionPolicy
from tpo_agents.rollout import as_tensor, distinct_for, env_prompts, run_episodes


@dataclass
class TokenGroups:
    """Token-level groups: B behaviour trajectories of H steps with K scored candidates per state."""

    obs: th.Tensor  # [B, H, *obs_shape]
    actions: th.Tensor  # [B, H] behaviour tokens (= candidates[..., 0])
    candidates: th.Tensor  # [B, H, K]
    scores: th.Tensor  # [B, H, K] r_{t,i}
    old_log_probs: th.Tensor | None  # [B, H, V] (None: the update's first forward's)
    token_rewards: th.Tensor  # [B, H] the behaviour trajectory's rewards
    returns: th.Tensor  # [B]
    prompts: th.Tensor | None = None  # [B, H]
    distinct: tuple[th.Tensor, th.Tensor] | None = field(default=None, repr=False)  # as ``Episodes.distinct``

    def log_probs(self, policy: Any) -> th.Tensor:
        """log pi_theta(.|x_t) at every step ``[B, H, V]``, with gradient."""
        return episode_log_probs(policy, self)


@th.no_grad()
def collect_token_groups(
    env: VectorEnv, policy: ActionPolicy, group_size: int, on_step: StepHook | None = None
) -> TokenGroups | None:
    """One behaviour trajectory per sub-env with ``group_size`` scored next-token candidates per state."""
    obs, _ = env.reset()
    prompts = env_prompts(env)
    steps = run_episodes(env, obs, policy, group_size, on_step)
    if steps is None:
        return None
    actions = steps["candidates"][..., 0]
    prompts_t = None if prompts is None else as_tensor(prompts, policy.device)
    return TokenGroups(
        obs=steps["obs"],
        actions=actions,
        candidates=steps["candidates"],
        scores=steps["scores"],
        old_log_probs=None,
        token_rewards=steps["token_rewards"],
        returns=steps["returns"],
        prompts=prompts_t,
        distinct=distinct_for(policy, prompts_t, actions),
    )


class TokenMode(EpisodeMode):
    """B behaviour trajectories; at each state x_t, K candidates a_{t,i} ~ pi_old(.|x_t) with the
    env's rewards r_{t,i}; the trajectory continues with the first candidate (paper Sec. 3.4).

    Group view: L[b,t,i] = log pi(a_{t,i} | x_t), s[b,t,i] = r_{t,i}, groups ``[B, H, K]``.
    """

    name = "token"
    views = ("group",)
    needs = "a per-step reward (reward='bag_of_tokens' or 'sequential', not 'terminal')"

    @classmethod
    def can_collect(cls, traits: EnvTraits) -> bool:
        """Candidates are scored at every prefix: the reward must be dense (not ``terminal``)."""
        return traits.dense_reward

    @classmethod
    def is_natural_for(cls, traits: EnvTraits) -> bool:
        """The dense-reward token tasks: episodes of several steps, each step scored."""
        return traits.dense_reward and traits.horizon > 1

    @classmethod
    def min_group_size(cls, view: str) -> int:
        return 2

    @property
    def n_envs(self) -> int:
        return self.batch_size

    def collect(self, env: VectorEnv, policy: ActionPolicy, on_step: StepHook) -> TokenGroups | None:
        return collect_token_groups(env, policy, self.group_size, on_step)

    def has_signal(self, batch: TokenGroups, view: str) -> bool:
        return not bool(losses.zero_variance_groups(batch.scores).all())

    def group_view(self, batch: TokenGroups, log_probs) -> GroupView:
        return GroupView(
            log_probs.gather(-1, batch.candidates),
            batch.old_log_probs.gather(-1, batch.candidates),
            batch.scores,
        )
