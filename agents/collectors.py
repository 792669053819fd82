"""Where a batch comes from: the generic collector (the collection mode's own ``collect``) or a fast
collector registered for the env / policy / mode it serves.

A collector is called with the step hook and returns one batch, or None when the hook stops collection::

    batch = collector(on_step)        # on_step(n_interactions) -> False stops (a callback's on_step)

It reads the env and the policy and writes nothing but its batch: the learn loop
(:meth:`tpo_agents.learn_loop.GroupAlgorithm.collect`) starts and ends the rollout around it, counts the
interactions and records the batch. A fast collector (:mod:`tpo_agents.fast_collectors`) builds the same
batch as the generic one from fewer env and policy calls; it registers itself with
:func:`register_fast_collector` and says in :meth:`FastCollector.serves` which env, policy and mode it
serves. :func:`make_collector` takes the first registered one that serves, else the generic collector,
which stays the reference (``tests/tpo_agents/test_fast_collectors.py`` holds the two equal).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from gymnasium.vector import VectorEnv

from tpo_agents.modes import CollectionMode
from tpo_agents.modes.base import StepHook

Collector = Callable[[StepHook], Any]
"""``collector(on_step)``: one batch, or None when ``on_step`` asked to stop."""


class ModeCollector:
    """The generic collector: the mode's own :meth:`~tpo_agents.modes.CollectionMode.collect`."""

    #: Whether this is a fast collector (the learn loop then computes the ``train/`` diagnostics and the
    #: ``rollout/`` values of logged updates only, unless a callback asks for every update's).
    fast: ClassVar[bool] = False

    def __init__(self, env: VectorEnv, policy: Any, mode: CollectionMode) -> None:
        self.env, self.policy, self.mode = env, policy, mode

    def __call__(self, on_step: StepHook) -> Any:
        return self.mode.collect(self.env, self.policy, on_step)


class FastCollector(ModeCollector):
    """A collector that builds the generic collector's batch its own way, for what :meth:`serves`."""

    fast = True

    @classmethod
    def serves(cls, env: VectorEnv, policy: Any, mode: CollectionMode) -> bool:
        """Whether this collector builds the batches of ``mode`` for ``policy`` on ``env``."""
        raise NotImplementedError

    def __call__(self, on_step: StepHook) -> Any:
        raise NotImplementedError


FAST_COLLECTORS: list[type[FastCollector]] = []
"""The registered fast collectors, in the order :func:`make_collector` asks them."""


def register_fast_collector(collector: type[FastCollector]) -> type[FastCollector]:
    """Register ``collector`` (a class decorator)."""
    FAST_COLLECTORS.append(collector)
    return collector


def make_collector(env: VectorEnv, policy: Any, mode: CollectionMode, fast: bool = True) -> ModeCollector:
    """The first registered fast collector that serves ``env``, ``policy`` and ``mode`` (with ``fast``),
    else the generic :class:`ModeCollector`."""
    for collector in FAST_COLLECTORS if fast else ():
        if collector.serves(env, policy, mode):
            return collector(env, policy, mode)
    return ModeCollector(env, policy, mode)
