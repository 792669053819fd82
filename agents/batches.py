"""The batches the collection modes collect: episodes, token groups, exact batches, a table's samples.

Every field is a tensor on the policy's device, rows context-major (the K candidates of a context
adjacent) and, for a population, member-major: :mod:`tpo_agents.rollout` and
:mod:`tpo_agents.fast_collectors` fill them, the modes (:mod:`tpo_agents.modes`) read views from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch as th


@dataclass
class Episodes:
    """``n_contexts * group_size`` episodes of ``T`` steps, context-major (rows bK..bK+K-1 share context b).

    ``token_rewards`` are the per-step rewards r_t (paper Sec. 3.4; for the token tasks the env's
    ``info["token_rewards"]``; terminal reward copies the exact-match flag to every position).
    """

    obs: th.Tensor  # [N, T, *obs_shape] observation before each action
    actions: th.Tensor  # [N, T]
    old_log_probs: th.Tensor  # [N, T, A] log pi_old(.|x_t), full action set
    token_rewards: th.Tensor  # [N, T]
    returns: th.Tensor  # [N] episode returns as the env paid them
    contexts: th.Tensor  # [N] integer context id when the env has one, else the row's group index
    n_contexts: int
    group_size: int
    prompts: th.Tensor | None = None  # [N, H] for the token tasks (teacher-forced re-scoring)
    distinct: tuple[th.Tensor, th.Tensor] | None = field(default=None, repr=False)  # see distinct_sequences
    #: log pi_theta [N, T, A] with gradient, computed at collection (one forward per update; old_log_probs
    #: is its detached copy): the first epoch's log-probabilities (``CollectionMode.first_epoch_log_probs``).
    first_log_probs: th.Tensor | None = field(default=None, repr=False)


@dataclass
class TokenGroups:
    """Token-level groups: B behaviour trajectories of H steps with K scored candidates per state."""

    obs: th.Tensor  # [B, H, *obs_shape]
    actions: th.Tensor  # [B, H] behaviour tokens (= candidates[..., 0])
    candidates: th.Tensor  # [B, H, K]
    scores: th.Tensor  # [B, H, K] r_{t,i}
    old_log_probs: th.Tensor  # [B, H, V]
    token_rewards: th.Tensor  # [B, H] the behaviour trajectory's rewards
    returns: th.Tensor  # [B]
    prompts: th.Tensor | None = None  # [B, H]
    distinct: tuple[th.Tensor, th.Tensor] | None = field(default=None, repr=False)
    #: log pi_theta [B, H, V] with gradient for the first epoch (see ``Episodes.first_log_probs``).
    first_log_probs: th.Tensor | None = field(default=None, repr=False)


@dataclass
class ExactBatch:
    """Every action of every context: ``rewards[n, a]`` and ``log pi_old(a | n)``."""

    obs: th.Tensor  # [N, *obs_shape]
    rewards: th.Tensor  # [N, A]
    old_log_probs: th.Tensor  # [N, A]
    #: log pi_theta [N, A] with gradient from a fused collector (see ``Episodes.first_log_probs``).
    first_log_probs: th.Tensor | None = field(default=None, repr=False)


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
    old_log_probs: th.Tensor  # [S, A] log pi_old of each member's one context
    prompts: None = None
    #: log pi_theta [S, A] with gradient, for the first epoch (see ``Episodes.first_log_probs``).
    first_log_probs: th.Tensor | None = field(default=None, repr=False)

    def expanded(self, log_probs: th.Tensor) -> th.Tensor:
        """Member rows ``[S, A]`` repeated for each sample as ``Episodes`` holds them: ``[S*B, 1, A]``."""
        n_members, per_member = self.actions.shape
        return log_probs.unsqueeze(1).expand(n_members, per_member, -1).reshape(-1, 1, log_probs.shape[-1])
