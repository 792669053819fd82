"""What a collection mode is: how many sub-envs it needs, how it collects, the views of a batch that the
losses read, and what it logs.

An algorithm implements its loss on one or more *views* of a batch:

* ``group_loss(GroupView)``: groups ``[..., K]`` of candidates with log-scores and raw scores (TPO,
  GRPO, Group PG);
* ``sample_loss(SampleView)``: one sampled trajectory per context with per-token advantages (PPO,
  DG, PG, and the single-sample GRPO and Group PG);
* ``exact_loss(ExactView)``: every action of every context with its exact reward, weighted by
  pi_old in the loss (the multi-context bandit's expected updates of PG, DG, GRPO and the CE oracle).

A mode lists the views it offers, preferred first; the algorithm uses the first one it implements.
So a new mode (text completions for language models, say) offers views, and every algorithm with a
loss on one of them runs on it unchanged.

A mode also says which envs it collects from (:attr:`CollectionMode.env_types`, the registered
classes) and, from an env's :class:`EnvTraits`, whether it *can* collect from it and whether it is the
*natural* way to (the paper's and the zoo's choice): an algorithm built without ``group_mode`` takes
the first mode of its ``mode_preference`` that is natural for the env
(:meth:`tpo_agents.learn_loop.GroupAlgorithm.natural_mode`).

Each mode's batch lives beside it (``Episodes`` in :mod:`~tpo_agents.modes.episodes`, ``TokenGroups`` in
:mod:`~tpo_agents.modes.token`, ``ExactBatch`` in :mod:`~tpo_agents.modes.exact`, ``TextBatch`` in
:mod:`~tpo_agents.modes.text`), with the function that collects it. Every field is a tensor on the
policy's device, rows context-major (the K candidates of a context adjacent) and, for a population,
member-major; a batch computes its own log-probabilities (``batch.log_probs(policy)``).

**pi_old** (``old_log_probs``) is written once. A collection that needs it (to sample from it, or for its
``rollout/`` values: a logit table, the MLP on MNIST, exact mode) writes it, from a forward without
gradient. Everywhere else (the episodes of the token tasks: their sampling decodes with a KV cache, whose
log-probs differ from the update's teacher-forced forward by rounding; text completions) collection leaves
it None, and the update writes it from its first epoch's forward, detached
(:meth:`CollectionMode.keep_old_log_probs`): exact, with no second pass, and no autograd graph kept from
collection into the update, but one: a fast collector whose forward the update repeats exactly (the MLP
on MNIST, one-step episodes; the logit table in exact mode) computes it with gradient and hands it to the
first epoch (``first_forward``), where a second forward would cost a fifth of a 20-member MNIST step, or
add a quarter to a 100-member exact update of the table (``tpo_agents.fast_collectors``). The first epoch then
has L_theta = L_old exactly, so a group without signal
has an exactly zero gradient (GRPO's ratio is 1, its k3 KL and the TPO gap p - q vanish), as in the paper
and its reference code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import torch as th
from gymnasium import spaces
from gymnasium.vector import VectorEnv
from stable_baselines3.common.logger import Logger

from tpo_agents import losses
from tpo_agents.policies.protocols import ActionPolicy
from tpo_gym.vector import BatchedTaskEnv, BatchedTaskVectorEnv

StepHook = Callable[[int], bool]
"""Called after every env step with the number of interactions it made; False stops collection."""

Collector = Callable[[StepHook], Any]
"""``collector(on_step)``: one batch, or None when ``on_step`` asked to stop."""


class ModeCollector:
    """The generic collector: the mode's own :meth:`CollectionMode.collect`, called with the step hook."""

    #: Whether this is a fast collector (the learn loop then computes the ``train/`` diagnostics and the
    #: ``rollout/`` values of logged updates only, unless a callback asks for every update's).
    fast: ClassVar[bool] = False

    def __init__(self, env: VectorEnv, policy: Any, mode: CollectionMode) -> None:
        self.env, self.policy, self.mode = env, policy, mode

    def __call__(self, on_step: StepHook) -> Any:
        return self.mode.collect(self.env, self.policy, on_step)


class FastCollector(ModeCollector):
    """A collector that builds the generic collector's batch its own way (fewer env and policy calls), for
    the env, policy and mode it :meth:`serves`; it registers itself with :func:`register_fast_collector`
    (:mod:`tpo_agents.fast_collectors`). It reads the env and the policy and writes nothing but its batch."""

    fast = True

    @classmethod
    def serves(cls, env: VectorEnv, policy: Any, mode: CollectionMode) -> bool:
        """Whether this collector builds the batches of ``mode`` for ``policy`` on ``env``."""
        raise NotImplementedError

    def __call__(self, on_step: StepHook) -> Any:
        raise NotImplementedError


FAST_COLLECTORS: list[type[FastCollector]] = []
"""The registered fast collectors, in the order :meth:`CollectionMode.collector` asks them."""


def register_fast_collector(collector: type[FastCollector]) -> type[FastCollector]:
    """Register ``collector`` (a class decorator)."""
    FAST_COLLECTORS.append(collector)
    return collector


VIEWS = ("group", "sample", "exact")
#: K where a mode's groups are K candidates per context and ``group_size`` is not given (paper: K = 8).
DEFAULT_GROUP_SIZE = 8


class EnvTraits:
    """What the choice of a collection mode reads from an env, from one single env of it (a probe)
    built on first use: a choice that reads no trait (a text env, collected in ``text`` mode only)
    builds no env.

    :param make_env: returns the probe env (a ``tpo_gym`` ``BatchedTaskEnv``, possibly wrapped)
    """

    def __init__(self, make_env: Callable[[], Any]) -> None:
        self._make_env = make_env
        self.env: Any | None = None  # the probe, once built

    def _probe(self) -> Any:
        if self.env is None:
            self.env = self._make_env()
        return self.env

    def _task(self) -> Any:
        """The probe's batched task (``BatchedTask``: ``horizon``, and ``reward`` on the token tasks)."""
        return getattr(self._probe().unwrapped, "task", None)

    @cached_property
    def horizon(self) -> int:
        """Steps per episode; 1 is a bandit (one action per context: the k-armed and multi-context
        bandits, MNIST)."""
        return int(getattr(self._task(), "horizon", 1))

    @cached_property
    def dense_reward(self) -> bool:
        """Every step is rewarded, so candidates can be scored at each prefix: the env's ``reward``
        kwarg is not ``"terminal"`` (the token tasks' terminal reward scores whole sequences only)."""
        return getattr(self._task(), "reward", None) != "terminal"

    @cached_property
    def n_contexts(self) -> int | None:
        """The number of contexts when the observation is a context index (a ``Discrete`` space: the
        tabular bandits), else None (images, token prompts)."""
        space = self._probe().observation_space
        return int(space.n) if isinstance(space, spaces.Discrete) else None


@dataclass
class CompletionTokens:
    """The tokens of a group view's candidates (text mode: the completions), for token-level losses:
    log pi_theta (with gradient) and log pi_old of every token ``[R, T]``, rows i*K .. i*K+K-1 the
    candidates of group i, and their 0/1 ``mask``. ``n_tokens`` is the count a token sum of these rows is
    divided by: the completion tokens of the whole batch times the rows' share R / N of it (the trainer
    weights each part's loss by that share), so that the parts' sum_t m terms / n_tokens add up to one
    mean over the batch's tokens whatever the micro-batch size."""

    log_probs: th.Tensor
    old_log_probs: th.Tensor
    mask: th.Tensor
    n_tokens: th.Tensor


def member_rows(values: th.Tensor, n_seeds: int) -> th.Tensor:
    """A member-major batch ``[S*N, ...]`` as ``[S, N, ...]``."""
    return values.reshape(n_seeds, -1, *values.shape[1:])


def per_member(fn: Callable[..., th.Tensor], n_seeds: int, *tensors: th.Tensor) -> th.Tensor:
    """``fn`` (a batch-wide statistic such as a batch-mean baseline) applied to each member's rows of
    member-major tensors separately, the results stacked back member-major; ``fn(*tensors)`` for one
    member."""
    if n_seeds == 1:
        return fn(*tensors)
    return th.vmap(fn)(*(member_rows(t, n_seeds) for t in tensors)).flatten(0, 1)


class MemberRows:
    """What a view of a population's batch (``n_seeds`` members, member-major rows) offers its loss:
    a batch-wide statistic taken per member (:meth:`per_member`)."""

    n_seeds: int

    def per_member(self, fn: Callable[..., th.Tensor], *tensors: th.Tensor) -> th.Tensor:
        """:func:`per_member` over this view's members."""
        return per_member(fn, self.n_seeds, *tensors)


@dataclass
class GroupView(MemberRows):
    """Groups ``[..., K]``: current log-scores L_theta (with gradient), L_old and raw scores s; ``valid``
    (bool ``[..., K]``, None: all) marks the candidates that take part in the group softmax (the text
    mode drops completions without tokens); ``tokens``: the candidates' tokens, in the modes with
    :attr:`CollectionMode.has_completion_tokens` (text), else None."""

    logscores: th.Tensor
    old_logscores: th.Tensor
    scores: th.Tensor
    valid: th.Tensor | None = None
    tokens: CompletionTokens | None = None
    n_seeds: int = 1
    kind: ClassVar[str] = "group"


@dataclass
class SampleView(MemberRows):
    """One sampled trajectory per context, ``[N, T]``: log pi_theta and log pi_old of the taken
    actions, the rewards and advantages A = r - b (per token ``[N, T]``, or per sequence ``[N]``),
    the actions, ``sequence_advantages`` [N] (the baseline applied to each trajectory's summed
    reward) and the token ``weights`` (padding mask) the losses take."""

    logp: th.Tensor
    old_logp: th.Tensor
    rewards: th.Tensor
    advantages: th.Tensor
    actions: th.Tensor
    sequence_advantages: th.Tensor
    n_actions: int
    weights: th.Tensor | None = None  # 0/1 mask of real tokens [N, T] (text completions), None: all
    n_seeds: int = 1
    kind: ClassVar[str] = "sample"


@dataclass
class ExactView(MemberRows):
    """Every action of every context, ``[N, A]``: log pi_theta, log pi_old and the exact rewards."""

    log_probs: th.Tensor
    old_log_probs: th.Tensor
    rewards: th.Tensor
    n_seeds: int = 1
    kind: ClassVar[str] = "exact"

    @property
    def old_probs(self) -> th.Tensor:
        """pi_old(a), the weights of the exact expected update."""
        return self.old_log_probs.exp()


View = GroupView | SampleView | ExactView


class CollectionMode(ABC):
    """One way of collecting groups from a natively batched ``tpo_gym`` vector env.

    :param batch_size: B, contexts per update
    :param group_size: K, candidates per context
    :param match: ``prompts`` or ``interactions`` (single mode: B*K contexts and lr x sqrt(K))
    :param baseline: single mode: ``batch_mean``, ``expected`` or a number
    :param observation_space: the single env's observation space
    :param n_seeds: S independent learners collected together (member-major rows, see
        ``GroupPolicy``); :attr:`n_envs` is per member, every batch-wide statistic is per member
    """

    name: ClassVar[str]
    views: ClassVar[tuple[str, ...]]
    #: The single-env classes (registered entry points) and vector-env classes the mode collects from.
    env_types: ClassVar[tuple[type, ...]] = (BatchedTaskEnv,)
    vector_env_types: ClassVar[tuple[type, ...]] = (BatchedTaskVectorEnv,)
    env_description: ClassVar[str] = "a natively batched tpo_gym env (the TPO/ token, bandit and MNIST envs)"
    action_space_types: ClassVar[tuple[type, ...]] = (spaces.Discrete,)
    #: What :meth:`can_collect` asks of an env, for the error when no mode of an algorithm can train on it.
    needs: ClassVar[str] = "an env of its classes"
    #: Whether :meth:`reference_kl` is available (a frozen reference model, ``kl_coef``).
    has_reference_kl: ClassVar[bool] = False
    #: Whether the group view carries its candidates' tokens (:class:`CompletionTokens`), for token-level
    #: losses (GRPO's ``loss_type="dapo"``).
    has_completion_tokens: ClassVar[bool] = False

    def __init__(
        self, batch_size: int, group_size: int, match: str, baseline: Any, observation_space: Any,
        n_seeds: int = 1,
    ) -> None:
        self.batch_size, self.group_size, self.match = batch_size, group_size, match
        self.baseline, self.observation_space = baseline, observation_space
        self.n_seeds = n_seeds

    @classmethod
    def collects_from(cls, env_class: Any) -> bool:
        """Whether ``env_class`` (a registered entry point) is one of the envs this mode collects from."""
        return isinstance(env_class, type) and issubclass(env_class, cls.env_types)

    @classmethod
    def collects_from_vector(cls, vector_env_class: type) -> bool:
        """Whether ``vector_env_class`` (an unwrapped vector env's class) is one this mode collects from."""
        return issubclass(vector_env_class, cls.vector_env_types)

    @classmethod
    def can_collect(cls, traits: EnvTraits) -> bool:
        """Whether this mode can train on an env with ``traits`` (of a class it collects from)."""
        return True

    @classmethod
    def is_natural_for(cls, traits: EnvTraits) -> bool:
        """Whether this mode is the natural way to collect groups from an env with ``traits`` (the
        paper's and the zoo's choice); a subclass narrows it, and implies :meth:`can_collect`."""
        return cls.can_collect(traits)

    @classmethod
    def uses_group_size(cls, match: str) -> bool:
        """Whether ``group_size`` K changes what this mode collects (True here: K candidates per
        context form a group); False where the action set is the group or each sample stands alone."""
        return True

    @classmethod
    def default_group_size(cls, match: str) -> int:
        """K when ``group_size`` is not given: :data:`DEFAULT_GROUP_SIZE` where the mode uses K, else 1."""
        return DEFAULT_GROUP_SIZE if cls.uses_group_size(match) else 1

    @classmethod
    def min_group_size(cls, view: str) -> int:
        """The smallest ``group_size`` K this mode can train with through ``view``: 1 here (K is not the
        group: the action set is, or each sample stands alone); 2 where K candidates of one context
        form the group (a group of one candidate carries no signal)."""
        return 1

    @property
    @abstractmethod
    def n_envs(self) -> int:
        """Sub-envs the mode steps at once, per member."""

    @property
    def lr_scale(self) -> float:
        """Factor on the learning rate (interaction matching)."""
        return 1.0

    @abstractmethod
    def steps_per_collect(self, env: VectorEnv) -> int:
        """Env interactions (``num_timesteps``) that one :meth:`collect` adds."""

    def collector(self, env: VectorEnv, policy: Any, fast: bool = True) -> ModeCollector:
        """Where this mode's batches come from: the first registered fast collector that serves ``env``,
        ``policy`` and this mode (with ``fast``), else the generic :class:`ModeCollector`, which stays the
        reference (``tests/tpo_agents/test_fast_collectors.py`` holds the two equal)."""
        for collector in FAST_COLLECTORS if fast else ():
            if collector.serves(env, policy, self):
                return collector(env, policy, self)
        return ModeCollector(env, policy, self)

    @abstractmethod
    def collect(self, env: VectorEnv, policy: ActionPolicy, on_step: StepHook) -> Any:
        """One batch, or None when ``on_step`` asks to stop."""

    def log_probs(self, policy: ActionPolicy, batch: Any, first_epoch: bool = False) -> th.Tensor:
        """log pi_theta at every state of the batch, with gradients (``[N, T, A]`` or ``[N, A]``): the batch's
        own (``batch.log_probs(policy)``); at the first epoch, the forward its collector sampled from where
        one handed it over (``batch.first_forward``: the MNIST and exact-table collectors', see the module's
        docstring)."""
        forward = getattr(batch, "first_forward", None) if first_epoch else None
        return batch.log_probs(policy) if forward is None else forward

    def keep_old_log_probs(self, batch: Any, log_probs: th.Tensor) -> None:
        """Write pi_old into a batch whose collection left it None (the module's docstring):
        ``log_probs``, the update's first forward at theta_old, detached. Called once per batch (part),
        by the first epoch; a batch that holds pi_old keeps it."""
        if batch.old_log_probs is None:
            batch.old_log_probs = log_probs.detach()

    def view(self, kind: str, batch: Any, log_probs: th.Tensor) -> View:
        """The ``kind`` view (one of :attr:`views`) of ``batch`` at the current ``log_probs``."""
        if kind not in self.views:
            raise ValueError(f"view {kind!r}: {self.name} mode offers {', '.join(self.views)}")
        build = {"group": self.group_view, "sample": self.sample_view, "exact": self.exact_view}[kind]
        view = build(batch, log_probs)
        view.n_seeds = self.n_seeds
        return view

    def group_view(self, batch: Any, log_probs: th.Tensor) -> GroupView:
        """Groups of candidates with their log-scores and scores (modes whose :attr:`views` have it)."""
        raise NotImplementedError(f"{self.name} mode has no group view")

    def sample_view(self, batch: Any, log_probs: th.Tensor) -> SampleView:
        """One sampled trajectory per context with its advantages (modes whose :attr:`views` have it)."""
        raise NotImplementedError(f"{self.name} mode has no sample view")

    def exact_view(self, batch: Any, log_probs: th.Tensor) -> ExactView:
        """Every action with its exact reward (modes whose :attr:`views` have it)."""
        raise NotImplementedError(f"{self.name} mode has no exact view")

    def member_rows(self, values: th.Tensor) -> th.Tensor:
        """A member-major batch ``[S*N, ...]`` as ``[S, N, ...]`` (:func:`member_rows`)."""
        return member_rows(values, self.n_seeds)

    def per_member(self, fn: Callable[..., th.Tensor], *tensors: th.Tensor) -> th.Tensor:
        """:func:`per_member` over this mode's members."""
        return per_member(fn, self.n_seeds, *tensors)

    def rollout_metrics(self, batch: Any) -> dict[str, th.Tensor]:
        """The batch's ``rollout/`` metrics per member, each ``[S]`` (the paper's task error before
        the update first); :meth:`log_rollout` records their means over the members."""
        raise NotImplementedError(f"{self.name} mode logs its own rollout metrics")

    def log_rollout(self, logger: Logger, batch: Any) -> dict[str, np.ndarray] | None:
        """Record the batch's ``rollout/`` metrics, the means over the members of
        :meth:`rollout_metrics`; returns the per-member values (None where a mode has none)."""
        metrics = {key: values.detach().cpu().numpy() for key, values in self.rollout_metrics(batch).items()}
        for key, values in metrics.items():
            logger.record(f"rollout/{key}", float(values.mean()))
        return metrics

    def episode_rows(self, batch: Any) -> dict[str, np.ndarray] | None:
        """Per-episode ``monitor.csv`` columns (``r``, ``l`` and info keys), None if no episodes."""
        return None

    def has_signal(self, batch: Any, view: str) -> bool:
        """Whether some group of the batch carries signal through ``view``: scores that are not all
        equal (the TPO target differs from p_old, a GRPO advantage is not 0), or a nonzero advantage.
        A batch without is trained on with an exactly zero gradient, or skipped
        (``skip_batches_without_signal``). True here: the mode's batches always carry some."""
        return True

    def parts(self, batch: Any) -> Iterator[tuple[Any, float]]:
        """The batch as parts of whole groups with their share of the loss (here: all of it, 1.0)."""
        yield batch, 1.0

    def approx_kl(self, batch: Any, log_probs: th.Tensor) -> th.Tensor:
        """KL(pi_old || pi_theta) over the action set, averaged over the batch's states."""
        return losses.policy_kl(batch.old_log_probs, log_probs)

    def keep_reference_log_probs(self, policy: Any, batch: Any) -> None:
        """Write the batch's log-probabilities under the frozen reference model, once, for
        :meth:`reference_kl` (modes with ``has_reference_kl``; called by the update's first epoch)."""
        raise NotImplementedError(f"{self.name} mode has no reference model")

    def reference_kl(self, batch: Any, log_probs: th.Tensor) -> th.Tensor:
        """The KL to a frozen reference model, with gradient (modes with ``has_reference_kl``)."""
        raise NotImplementedError(f"{self.name} mode has no reference model")

    def log_update(self, logger: Logger, batch: Any) -> None:
        """Record what the mode measures during an update (nothing here; text mode: the group softmax)."""
        return None

    def after_update(self, policy: Any) -> None:
        """Called after the optimizer steps of an update (a generation engine reloads the weights)."""
        return None

    def train_tokens(self, batch: Any) -> int | None:
        """Tokens one epoch trains on, for ``time/train_tokens_per_s`` (None: not logged)."""
        return None
