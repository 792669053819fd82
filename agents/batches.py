"""The batches the collection modes collect: episodes, token groups, exact batches, a table's samples.

Every field is a tensor on the policy's device, rows context-major (the K candidates of a context
adjacent) and, for a population, member-major: :mod:`tpo_agents.rollout` and
:mod:`tpo_agents.fast_collectors` fill them, the modes (:mod:`tpo_agents.modes`) read views from them.

**pi_old** (``old_log_probs``) is written once. A collection that needs it (to sample from it, or for its
``rollout/`` values: a logit table, the MLP on MNIST, exact mode) writes it, from a forward without
gradient. Everywhere else (the episodes of the token tasks: their sampling decodes with a KV cache, whose
log-probs differ from the update's teacher-forced forward by rounding) collection leaves it None, and the
update writes it from its first epoch's forward, detached
(:meth:`tpo_agents.modes.CollectionMode.keep_old_log_probs`): exact, with no second pass, and no autograd
graph kept from collection into the update. The first epoch then has L_theta = L_old exactly, so a
group without signal has an exactly zero gradient (GRPO's ratio is 1, its k3 KL and the TPO gap p - q
vanish), as in the paper and its reference code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch as th

from tpo_agents.decoding import episode_log_probs


@dataclass
class Episodes:
    """``n_contexts * group_size`` episodes of ``T`` steps, context-major (rows bK..bK+K-1 share context b).

    ``token_rewards`` are the per-step rewards r_t (paper Sec. 3.4; for the token tasks the env's
    ``info["token_rewards"]``; terminal reward copies the exact-match flag to every position).
    """

    obs: th.Tensor  # [N, T, *obs_shape] observation before each action
    actions: th.Tensor  # [N, T]
    old_log_probs: th.Tensor | None  # [N, T, A] log pi_old(.|x_t), full action set (None: the update's)
    token_rewards: th.Tensor  # [N, T]
    returns: th.Tensor  # [N] episode returns as the env paid them
    contexts: th.Tensor  # [N] integer context id when the env has one, else the row's group index
    n_contexts: int
    group_size: int
    prompts: th.Tensor | None = None  # [N, H] for the token tasks (teacher-forced re-scoring)
    #: the distinct rows of [prompt, actions] and the inverse index, where a sequence policy re-scores them
    #: (``tpo_agents.decoding.distinct_sequences``)
    distinct: tuple[th.Tensor, th.Tensor] | None = field(default=None, repr=False)

    def log_probs(self, policy: Any) -> th.Tensor:
        """log pi_theta(.|x_t) at every step ``[N, T, A]``, with gradient
        (:func:`~tpo_agents.decoding.episode_log_probs`)."""
        return episode_log_probs(policy, self)

    def per_sample(self, log_probs: th.Tensor) -> th.Tensor:
        """Log-probs ``[N, T, A]`` as this batch holds them, one row per sample (they are)."""
        return log_probs

    def taken(self, log_probs: th.Tensor) -> th.Tensor:
        """log pi of the taken actions ``[N, T]``."""
        return log_probs.gather(-1, self.actions.unsqueeze(-1)).squeeze(-1)

    def taken_actions(self) -> th.Tensor:
        """The taken actions ``[N, T]``."""
        return self.actions

    #: Whether the log-probs hold one row per member (:class:`TableSamples`) rather than per sample.
    one_row_per_member: ClassVar[bool] = False


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


@dataclass
class ExactBatch:
    """Every action of every context: ``rewards[n, a]`` and ``log pi_old(a | n)``."""

    obs: th.Tensor  # [N, *obs_shape]
    rewards: th.Tensor  # [N, A]
    old_log_probs: th.Tensor  # [N, A], written at collection (the rollout/ task error reads it)

    def log_probs(self, policy: Any) -> th.Tensor:
        """log pi_theta over the action set of every context ``[N, A]``, with gradient."""
        return policy.action_log_probs(self.obs)


@dataclass
class TableSamples:
    """B sampled actions per member from a one-context logit table (the k-armed bandit in single mode,
    ``tpo_agents.fast_collectors.TableSingleCollector``): the batch of ``Episodes`` with T = 1 without its
    ``[S*B, A]`` copies of the one row per member, which the single mode's views gather from instead.

    ``token_rewards`` and ``returns`` are as in ``Episodes`` (member-major rows, so the episode modes'
    ``rollout/`` metrics and monitor rows read them alike).
    """

    actions: th.Tensor  # [S, B] each member's sampled arms
    token_rewards: th.Tensor  # [S*B, 1]
    returns: th.Tensor  # [S*B]
    old_log_probs: th.Tensor  # [S, A] log pi_old of each member's one context, written at collection
    prompts: None = None

    def log_probs(self, policy: Any) -> th.Tensor:
        """log pi_theta of each member's one context ``[S, A]`` (its table row), with gradient."""
        return policy.all_log_probs().reshape(len(self.actions), -1)

    def per_sample(self, log_probs: th.Tensor) -> th.Tensor:
        """Member rows ``[S, A]`` repeated for each sample as ``Episodes`` holds them: ``[S*B, 1, A]``."""
        n_members, per_member = self.actions.shape
        return log_probs.unsqueeze(1).expand(n_members, per_member, -1).reshape(-1, 1, log_probs.shape[-1])

    def taken(self, log_probs: th.Tensor) -> th.Tensor:
        """log pi of each sample's arm ``[S*B, 1]`` from member rows ``[S, A]``."""
        return log_probs.gather(1, self.actions).reshape(-1, 1)

    def taken_actions(self) -> th.Tensor:
        """The sampled arms as ``Episodes.actions`` holds them: ``[S*B, 1]``."""
        return self.actions.reshape(-1, 1)

    one_row_per_member: ClassVar[bool] = True

    def member_mean_scores(self, advantages: th.Tensor, n_actions: int) -> th.Tensor:
        """The group scores of each member's one context ``[S, A]``: S[a] = (1/B) sum_b A_b [a_b = a], the
        context mean of the samples' one-hot scores."""
        n_members, per_member = self.actions.shape
        total = advantages.new_zeros(n_members, n_actions).scatter_add_(
            1, self.actions, advantages.detach().reshape(n_members, per_member))
        return total / per_member
