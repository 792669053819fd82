"""Exact mode: every action of every context scored exactly (the multi-context bandit's exact updates,
and the CE oracle).

Its former name ``population`` still works (``tpo_agents.modes.OLD_MODE_NAMES``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from tpo_agents.modes.base import CollectionMode, EnvTraits, ExactView, GroupView, StepHook
from tpo_agents.policies.protocols import ActionPolicy
from tpo_agents.rollout import as_tensor


@dataclass
class ExactBatch:
    """Every action of every context: ``rewards[n, a]`` and ``log pi_old(a | n)``."""

    obs: th.Tensor  # [N, *obs_shape]
    rewards: th.Tensor  # [N, A]
    old_log_probs: th.Tensor  # [N, A], written at collection (the rollout/ task error reads it)
    #: log pi_theta with gradient from the forward a fast collector sampled from (the MLP on MNIST), handed to
    #: the update's first epoch (``CollectionMode.log_probs``); None: the update forwards itself.
    first_forward: th.Tensor | None = field(default=None, repr=False)

    def log_probs(self, policy: Any) -> th.Tensor:
        """log pi_theta over the action set of every context ``[N, A]``, with gradient."""
        return policy.action_log_probs(self.obs)


@th.no_grad()
def collect_exact(
    env: VectorEnv, policy: ActionPolicy, exhaustive: bool, n_seeds: int = 1
) -> ExactBatch:
    """Score every action at each sub-env's context exactly (no sampling of actions, no stepping).

    ``exhaustive``: each member's contexts are ``0..num_envs/n_seeds - 1`` (a tabular env);
    otherwise fresh contexts are drawn (e.g. MNIST images for the supervised oracle).
    """
    device = policy.device
    options = {"contexts": np.tile(np.arange(env.num_envs // n_seeds), n_seeds)} if exhaustive else None
    obs, _ = env.reset(options=options)
    n_actions = int(env.single_action_space.n)
    all_actions = np.ascontiguousarray(np.broadcast_to(np.arange(n_actions), (env.num_envs, n_actions)))
    obs_t = as_tensor(obs, device)
    old_log_probs = policy.action_log_probs(obs_t)
    # the rewards in the log-probs' memory layout (an action-major table's), so that the losses'
    # elementwise ops and reductions over the actions run in one layout
    rewards = th.empty_like(old_log_probs).copy_(as_tensor(env.score_candidates(all_actions), device))
    return ExactBatch(obs=obs_t, rewards=rewards, old_log_probs=old_log_probs)


class ExactMode(CollectionMode):
    """All contexts of a tabular env (``Discrete`` observations), else ``batch_size`` drawn contexts
    (MNIST images for the CE oracle); the env scores every action, nothing is sampled.

    Exact view: log pi over the action set and the exact rewards r[n, a] (the loss weights by pi_old).
    Group view (TPO): the action set is the group, s = r.
    """

    name = "exact"
    views = ("exact", "group")
    needs = "one-step episodes (a bandit or MNIST)"

    @classmethod
    def can_collect(cls, traits: EnvTraits) -> bool:
        """One-step envs: the env scores every action of a context (bandits, MNIST), not a sequence."""
        return traits.horizon == 1

    @classmethod
    def is_natural_for(cls, traits: EnvTraits) -> bool:
        """A one-step env of several enumerable contexts (the multi-context bandit: exact updates over
        every context); one context (the k-armed bandit) or images (MNIST) are sampled in ``single``."""
        return traits.horizon == 1 and traits.n_contexts is not None and traits.n_contexts > 1

    @classmethod
    def uses_group_size(cls, match: str) -> bool:
        """The action set is the group: K is unused."""
        return False

    @property
    def n_envs(self) -> int:
        if isinstance(self.observation_space, spaces.Discrete):
            return int(self.observation_space.n)
        return self.batch_size

    def steps_per_collect(self, env: VectorEnv) -> int:
        return self.n_envs

    def collect(self, env: VectorEnv, policy: ActionPolicy, on_step: StepHook) -> ExactBatch | None:
        exhaustive = isinstance(self.observation_space, spaces.Discrete)
        batch = collect_exact(env, policy, exhaustive=exhaustive, n_seeds=self.n_seeds)
        return batch if on_step(env.num_envs) else None

    def exact_view(self, batch: ExactBatch, log_probs: th.Tensor) -> ExactView:
        return ExactView(log_probs, batch.old_log_probs, batch.rewards)

    def group_view(self, batch: ExactBatch, log_probs: th.Tensor) -> GroupView:
        return GroupView(log_probs, batch.old_log_probs, batch.rewards)

    def rollout_metrics(self, batch: ExactBatch) -> dict[str, th.Tensor]:
        """Task error = 1 - E_pi[r], the expected error of the policy before the update."""
        expected_reward = (batch.old_log_probs.exp() * batch.rewards).sum(-1)
        return {"task_error": 1 - self.member_rows(expected_reward).mean(1)}
