"""Tabular softmax policy: an explicit logit table (paper Sec. 3.1-3.2)."""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import Tensor, nn

from tpo_agents.layout import ACTION_MAJOR_MAX_ACTIONS, is_action_major, log_softmax_last

from .base import GroupPolicy
from .optim import NormalizedStep

__all__ = ["TabularSoftmaxPolicy"]


class TabularSoftmaxPolicy(GroupPolicy):
    """``pi(a | c) = softmax(z[c])`` with a logit table ``z`` of shape ``[n_contexts, n_actions]``.

    The observation is the context index (``Discrete(n_contexts)``; ``Discrete(1)`` for the
    single-context bandit). The default optimizer is :class:`NormalizedStep` with ``alpha = lr``:
    ``z <- z - alpha * grad / ||grad||`` with the global L2 norm over the whole table.
    A table of several contexts and at most :data:`ACTION_MAJOR_MAX_ACTIONS` actions lies action-major
    in memory (its log-probabilities too), which no value and no API shows.

    :param observation_space: ``Discrete(n_contexts)``
    :param action_space: ``Discrete(n_actions)``
    :param lr_schedule: SB3 schedule; ``lr_schedule(1)`` is the step length alpha (0.1 in the paper)
    :param init: ``"zeros"`` (uniform policy) or ``"normal"`` (i.i.d. N(0, 1) logits, torch's global RNG)
    :param optimizer_class: optimizer class (default :class:`NormalizedStep`)
    :param optimizer_kwargs: extra optimizer keyword arguments
    :param n_seeds: S independent tables ``[S, n_contexts, n_actions]`` (see :class:`GroupPolicy`);
        the normalised step then uses each member's own norm
    """

    supports_members = True
    members_amortize = True

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        init: str = "zeros",
        optimizer_class: type[torch.optim.Optimizer] | None = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = False,
        n_seeds: int = 1,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=normalize_images,
            n_seeds=n_seeds,
        )
        if not isinstance(observation_space, spaces.Discrete):
            raise ValueError(
                f"TabularSoftmaxPolicy needs a Discrete observation space, got {observation_space}"
            )
        self.n_contexts = int(observation_space.n)
        self.obs_start = int(observation_space.start)
        self.init = init
        shape = (self.n_contexts, self.n_actions)
        table = torch.empty(shape if n_seeds == 1 else (n_seeds, *shape))
        if init == "zeros":
            table.zero_()
        elif init == "normal":
            table.normal_(0.0, 1.0)
        else:
            raise ValueError(f"init must be 'zeros' or 'normal', got {init!r}")
        if self.n_contexts > 1 and self.n_actions <= ACTION_MAJOR_MAX_ACTIONS:  # same values, other layout
            table = table.movedim(-1, 0).contiguous().movedim(0, -1)
        self.logits = nn.Parameter(table)
        self._build_optimizer()

    def _default_optimizer(self, lr: float) -> torch.optim.Optimizer:
        return NormalizedStep(self.parameters(), lr=lr, n_seeds=self.n_seeds, **self.optimizer_kwargs)

    def _load_member(self, member: int, policy: GroupPolicy) -> None:
        self.logits[member].copy_(policy.logits)

    def _store_member(self, member: int, policy: GroupPolicy) -> None:
        policy.logits.copy_(self.logits[member])

    def context_index(self, obs: PyTorchObs) -> Tensor:
        """The 0-based context indices of a batch of observations, shape ``[N]``."""
        assert isinstance(obs, Tensor)
        return obs.reshape(-1).long().to(self.logits.device) - self.obs_start

    def action_log_probs(self, obs: PyTorchObs) -> Tensor:
        """``log pi(. | c_n)`` for each row's context, ``[N, A]`` in the table's memory layout.

        The table is normalised once, ``log_softmax(z)`` over every member and context, and row n reads
        table row ``m_n * C + c_n`` (member m_n of a member-major batch, context c_n) through one
        ``index_select``, whose gradient adds into the rows it read.
        """
        contexts = self.context_index(obs)
        table = log_softmax_last(self.logits).reshape(-1, self.n_actions)  # [S*C, A], a view in either layout
        rows = contexts
        if self.n_seeds > 1:
            rows = self.member_index(len(contexts)) * self.n_contexts + contexts
        if not is_action_major(table):
            return table.index_select(0, rows)
        return table.movedim(-1, 0).index_select(1, rows).movedim(0, -1)

    def member_log_probs(self, obs: PyTorchObs) -> Tensor:
        table = self.logits if self.n_seeds > 1 else self.logits.unsqueeze(0)
        return torch.log_softmax(table[:, self.context_index(obs)], dim=-1)

    def all_log_probs(self) -> Tensor:
        """``log pi`` for every context, shape ``[n_contexts, n_actions]`` (``[S, ...]`` for S members)."""
        return log_softmax_last(self.logits)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(init=self.init)
        return data
