"""Shared code of the categorical policies: the :class:`GroupPolicy` base and LeCun-normal init.

A group policy maps a batch of observations to the full log-probability vector over a discrete
action set, ``action_log_probs(obs) -> [N, A]``. Everything an algorithm needs (sampling, the
log-prob of given actions, SB3's ``predict``) is derived from that one method.

A population (``n_seeds > 1``) predicts with one member, :attr:`GroupPolicy.predict_member` (0
unless set with :meth:`GroupPolicy.set_predict_member` or passed as ``predict(..., member=m)``), on
any number of observations: that member's own forward (a cached one-member copy, refreshed when
the population's parameters change) and, when sampling, that member's own generator.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import Tensor

__all__ = ["GroupPolicy", "lecun_normal_", "TRUNCATED_NORMAL_STD"]

# Standard deviation of a standard normal truncated to [-2, 2] (flax/jax `variance_scaling`).
TRUNCATED_NORMAL_STD = 0.87962566103423978


@torch.no_grad()
def lecun_normal_(tensor: Tensor, fan_in: int) -> Tensor:
    """Fill ``tensor`` with flax's LeCun normal: ``variance_scaling(1, "fan_in", "truncated_normal")``.

    A standard normal truncated at +-2 is divided by its own std (0.8796...) and multiplied by
    ``1/sqrt(fan_in)``, so the final std is ``1/sqrt(fan_in)``. Uses torch's global RNG.
    """
    torch.nn.init.trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0)
    tensor.mul_(1.0 / (math.sqrt(fan_in) * TRUNCATED_NORMAL_STD))
    return tensor


class GroupPolicy(BasePolicy):
    """Base class of the categorical policies (SB3 ``BasePolicy`` subclass).

    Subclasses implement :meth:`action_log_probs` and :meth:`_default_optimizer` and call
    :meth:`_build_optimizer` at the end of their constructor.

    :param observation_space: observation space of the env
    :param action_space: a ``Discrete`` action space
    :param lr_schedule: SB3 learning-rate schedule; the optimizer starts at ``lr_schedule(1)``
    :param optimizer_class: optimizer class (default: the policy's own, see subclasses)
    :param optimizer_kwargs: extra keyword arguments of the optimizer (not the lr)
    :param normalize_images: kept for SB3 compatibility
    :param n_seeds: S independent members (a population of learners, the seeds of a run) whose
        parameters are stacked on a leading axis; a batch of ``N`` observations is member-major
        (rows ``m*N/S .. (m+1)*N/S - 1`` belong to member m). 1 is the plain policy.
    """

    #: Whether the policy has populations (``n_seeds > 1``).
    supports_members: ClassVar[bool] = False
    #: Whether a population's update costs little more than one member's (bound by per-op overhead, not
    #: arithmetic: the logit table, the MLP), so that a run's seeds train best in as few processes as
    #: possible; where False (the transformer) a population costs about its members' sum.
    members_amortize: ClassVar[bool] = False

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        optimizer_class: type[torch.optim.Optimizer] | None = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = False,
        n_seeds: int = 1,
    ) -> None:
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"{type(self).__name__} needs a Discrete action space, got {action_space}")
        super().__init__(
            observation_space,
            action_space,
            optimizer_class=optimizer_class if optimizer_class is not None else torch.optim.Adam,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=normalize_images,
        )
        self._custom_optimizer_class = optimizer_class
        self.lr_schedule = lr_schedule
        self.n_actions = int(action_space.n)
        self.action_start = int(action_space.start)
        if not isinstance(n_seeds, int) or isinstance(n_seeds, bool) or n_seeds < 1:
            raise ValueError(f"n_seeds must be an integer >= 1, got {n_seeds!r}")
        if n_seeds > 1 and not self.supports_members:
            raise ValueError(f"n_seeds={n_seeds}: {type(self).__name__} has no populations")
        self.n_seeds = n_seeds
        #: One sampling generator per member (``load_members``); None: torch's global generator.
        self.member_generators: list[torch.Generator] | None = None
        #: The member whose actions :meth:`predict` returns (populations; see :meth:`set_predict_member`).
        self.predict_member = 0
        # (key, one-member copy) of the member predict uses; a tuple, so that torch registers no submodule
        self._member_cache: tuple[tuple[Any, ...], GroupPolicy] | None = None
        #: Optimizer steps taken, part of the predicting member's cache key: a fused optimizer (the
        #: MLP's Adam) updates the parameters without bumping their ``_version``.
        self._optimizer_steps = 0

    # ------------------------------------------------------------------ to implement
    def action_log_probs(self, obs: PyTorchObs) -> Tensor:
        """``log pi(. | obs)`` over the whole action set, shape ``[N, n_actions]``."""
        raise NotImplementedError

    def _default_optimizer(self, lr: float) -> torch.optim.Optimizer:
        """The optimizer used when no ``optimizer_class`` is given."""
        return torch.optim.Adam(self.parameters(), lr=lr, **self.optimizer_kwargs)

    def _load_member(self, member: int, policy: GroupPolicy) -> None:
        """Copy the parameters of the one-member ``policy`` into member ``member`` (populations)."""
        raise NotImplementedError(f"{type(self).__name__} has no populations (n_seeds > 1)")

    def member_log_probs(self, obs: PyTorchObs) -> Tensor:
        """``log pi_m(. | obs)`` of every member m on the same observations, shape ``[S, N, n_actions]``."""
        raise NotImplementedError(f"{type(self).__name__} has no populations (n_seeds > 1)")

    # ------------------------------------------------------------------ populations
    def load_members(self, policies: list[GroupPolicy], generators: list[torch.Generator]) -> None:
        """Make member m a copy of ``policies[m]`` (one-member policies of the same settings, each built
        under its own seed) that samples with ``generators[m]``: member m then acts and learns as
        ``policies[m]`` would alone (the optimizer state starts fresh, as in a new run)."""
        if len(policies) != self.n_seeds or len(generators) != self.n_seeds:
            raise ValueError(f"need {self.n_seeds} member policies and generators, got "
                             f"{len(policies)} and {len(generators)}")
        with torch.no_grad():
            for member, policy in enumerate(policies):
                self._load_member(member, policy)
        self.member_generators = list(generators)

    def _store_member(self, member: int, policy: GroupPolicy) -> None:
        """Copy member ``member``'s parameters into the one-member ``policy`` (``_load_member`` reversed)."""
        raise NotImplementedError(f"{type(self).__name__} has no populations (n_seeds > 1)")

    def member_policy(self, member: int) -> GroupPolicy:
        """Member ``member`` of a population as a plain one-member policy of the same settings (its
        parameters copied, a fresh optimizer): predict, evaluate or save one seed of a population."""
        self._check_member(member)
        settings = self._get_constructor_parameters()
        settings.pop("n_seeds", None)
        policy = type(self)(**settings).to(self.device)
        with torch.no_grad():
            if self.n_seeds == 1:
                policy.load_state_dict(self.state_dict())
            else:
                self._store_member(member, policy)
        return policy

    def _check_member(self, member: Any) -> int:
        """``member`` if it names a member (an integer in ``[0, n_seeds - 1]``), else a one-line error."""
        integer = isinstance(member, int | np.integer) and not isinstance(member, bool)
        if not integer or not 0 <= member < self.n_seeds:
            raise ValueError(f"member must be an integer in [0, {self.n_seeds - 1}], got {member!r}")
        return int(member)

    def set_predict_member(self, member: int) -> None:
        """Make :meth:`predict` act with member ``member`` (default 0: the run with the model's seed)."""
        self.predict_member = self._check_member(member)

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        member: int | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """SB3's ``predict`` on one observation or a batch; a population acts with ``member`` (default:
        :attr:`predict_member`), its own forward and, when sampling, its own generator."""
        if member is None:
            return super().predict(observation, state, episode_start, deterministic)
        previous, self.predict_member = self.predict_member, self._check_member(member)
        try:
            return super().predict(observation, state, episode_start, deterministic)
        finally:
            self.predict_member = previous

    def predicting_policy(self) -> GroupPolicy:
        """The one-member policy :meth:`predict` runs: ``self``, or for a population a copy of member
        :attr:`predict_member` (:meth:`member_policy`) kept between calls and refreshed whenever the
        population's parameters change (an optimizer step, ``load_state_dict``, a move to a device).
        Building it leaves torch's global generator untouched."""
        if self.n_seeds == 1:
            return self
        member = self.predict_member
        key = (member, self._optimizer_steps, *((p.data_ptr(), p._version) for p in self.parameters()))
        cached = self._member_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        if cached is not None and cached[1].device == self.device:
            policy = cached[1]
            with torch.no_grad():
                self._store_member(member, policy)
        else:
            with torch.random.fork_rng(devices=[]):
                policy = self.member_policy(member)
        self._member_cache = (key, policy)
        return policy

    def member_index(self, n_rows: int) -> Tensor:
        """The member of each row of a member-major batch of ``n_rows`` rows, shape ``[n_rows]``."""
        return member_of_rows(n_rows, self.n_seeds, self.device)

    # ------------------------------------------------------------------ shared
    def _build_optimizer(self) -> None:
        lr = float(self.lr_schedule(1))
        if self._custom_optimizer_class is None:
            self.optimizer = self._default_optimizer(lr)
        else:
            self.optimizer = self._custom_optimizer_class(self.parameters(), lr=lr, **self.optimizer_kwargs)
        self.optimizer_class = type(self.optimizer)
        self.optimizer.register_step_post_hook(self._count_optimizer_step)

    def _count_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._optimizer_steps += 1

    def forward(self, obs: PyTorchObs) -> Tensor:  # type: ignore[override]
        """Same as :meth:`action_log_probs`."""
        return self.action_log_probs(obs)

    def sample(self, obs: PyTorchObs, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Sample one action index per row: returns ``(actions [N], log_probs [N, A])``."""
        log_probs = self.action_log_probs(obs)
        generators = self.member_generators if generator is None else [generator]
        actions = sample_categorical(log_probs, generators)
        return actions, log_probs

    def log_prob(self, obs: PyTorchObs, actions: Tensor) -> Tensor:
        """``log pi(actions | obs)``, shape ``[N]`` (actions are 0-based indices)."""
        log_probs = self.action_log_probs(obs)
        return log_probs.gather(-1, actions.long().reshape(-1, 1)).squeeze(-1)

    def _predict(self, observation: PyTorchObs, deterministic: bool = False) -> Tensor:
        generators = self.member_generators
        if self.n_seeds == 1:
            log_probs = self.action_log_probs(observation)
        else:  # one member on every row
            policy = self.predicting_policy()
            policy.set_training_mode(self.training)
            log_probs = policy.action_log_probs(observation)
            generators = None if generators is None else [generators[self.predict_member]]
        if deterministic:
            actions = log_probs.argmax(dim=-1)
        else:
            actions = sample_categorical(log_probs, generators)
        return actions + self.action_start

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            lr_schedule=self._dummy_schedule,
            optimizer_class=self._custom_optimizer_class,
            optimizer_kwargs=self.optimizer_kwargs,
        )
        if self.n_seeds > 1:
            data["n_seeds"] = self.n_seeds
        return data


def member_of_rows(n_rows: int, n_seeds: int, device: torch.device | str | None = None) -> Tensor:
    """The member of each row of a member-major batch (``n_seeds`` equal blocks of rows), ``[n_rows]``."""
    if n_rows % n_seeds:
        raise ValueError(f"a batch of {n_rows} rows cannot be split among {n_seeds} members")
    return torch.arange(n_rows, device=device) // (n_rows // n_seeds)


def sample_categorical(log_probs: Tensor, generators: list[torch.Generator] | None = None) -> Tensor:
    """One draw per row of ``[..., A]`` log-probabilities, returned with shape ``[...]``."""
    return multinomial_rows(log_probs, 1, generators).reshape(log_probs.shape[:-1])


def multinomial_rows(log_probs: Tensor, n: int, generators: list[torch.Generator] | None = None) -> Tensor:
    """``n`` i.i.d. draws from each row of ``[..., A]`` log-probabilities by inverse CDF, shape ``[R, n]``
    for the ``R`` rows: with ``F_a = sum_{b <= a} pi_b`` and one ``u ~ U[0, 1)`` per draw, the action is
    the first ``a`` with ``F_a > u F_A`` (``F_A``: the row's total, 1 up to rounding), so an action of
    probability 0 is never drawn. One uniform per draw, where ``torch.multinomial`` spends one
    exponential per action and draw.

    ``generators``: one generator per member of a member-major batch (rows split into equal blocks),
    each block drawn with its member's generator exactly as that member alone would draw it; None
    draws every row from torch's global generator.
    """
    cdf = log_probs.detach().reshape(-1, log_probs.shape[-1]).exp().cumsum(-1)
    rows, options = cdf.shape[0], dict(device=cdf.device, dtype=cdf.dtype)
    if generators is None:
        uniforms = torch.rand(rows, n, **options)
    else:
        if rows % len(generators):
            raise ValueError(f"a batch of {rows} rows cannot be split among {len(generators)} members")
        block = rows // len(generators)
        uniforms = torch.cat([torch.rand(block, n, generator=g, **options) for g in generators])
    draws = torch.searchsorted(cdf, uniforms * cdf[:, -1:], right=True)
    return draws.clamp_max_(cdf.shape[-1] - 1)
