"""The fused collection of the small policies, beside the generic mode path of the learn loop.

The generic path (``GroupAlgorithm.collect``) asks the env for every batch: in population mode it resets
every sub-env to its context, scores every action through the env (numpy), gathers the policy's
log-probabilities row by row and wraps them in a batch. For a logit table in population mode all of
that is the same at every update but the log-probabilities: the contexts are every context of the
table, and the exact rewards ``r[c, a]`` of a tabular env are fixed (its correct arms are). So a
:class:`TablePopulationCollector` scores the env once, at the first update, through the generic
``collect_population``, and afterwards builds each batch from the table alone:
``L_old = log_softmax(z)`` for every member and context, the cached rewards and observations.

In single mode on a one-context table (the k-armed bandit, paper Sec. 3.1) the generic path steps B
sub-envs per member and samples each row's action from that row's copy of the one distribution;
:class:`TableSingleCollector` draws each member's B actions from its one row of ``pi = softmax(z)``
(inverse CDF, the member's generator: the same uniforms, so the same actions) and reads the rewards
from the arms' rewards, scored by the env once.

The update itself is the generic one (``GroupAlgorithm.train``: the algorithm's own loss from
``agents.losses`` on the mode's views); with a fused collector the learn loop computes the ``train/``
diagnostics (the loss's stats, the gradient norm, the KL to pi_old) only for updates whose logs are
written (every ``log_interval``) or when a callback asks for them (``wants_train_diagnostics``).
Everything else covers no engine yet (tabular single mode, the MLP, the transformer, text) and goes the
generic path, which stays the reference: ``tests/test_engine.py`` holds the two equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback

from agents.modes.population import PopulationMode
from agents.modes.single import SingleMode
from agents.policies.base import multinomial_rows
from agents.policies.tabular import TabularSoftmaxPolicy
from agents.rollout import Episodes, Population, collect_population

Collector = Callable[[BaseCallback], Any]
"""``collector(callback)``: one batch, or None when a callback stopped training (as ``collect``)."""


def wants_train_diagnostics(callback: BaseCallback | None) -> bool:
    """Whether ``callback`` (or one it chains: ``CallbackList``, an event callback's child) reads the
    ``train/`` diagnostics of every update: it says so with ``wants_train_diagnostics = True``."""
    if callback is None:
        return False
    if getattr(callback, "wants_train_diagnostics", False):
        return True
    children = [*getattr(callback, "callbacks", []), getattr(callback, "callback", None)]
    return any(wants_train_diagnostics(child) for child in children if isinstance(child, BaseCallback))


def fused_collector(model: Any) -> Collector | None:
    """The fused collector of ``model`` (a ``GroupAlgorithm`` with its env), or None for the generic path
    (also where ``model.use_engine`` is False)."""
    table = isinstance(model.policy, TabularSoftmaxPolicy) and isinstance(model.observation_space,
                                                                          spaces.Discrete)
    if not (model.use_engine and table) or model.kl_coef:
        return None
    if isinstance(model.mode, PopulationMode):
        return TablePopulationCollector(model)
    if isinstance(model.mode, SingleMode) and model.observation_space.n == 1:
        return TableSingleCollector(model)
    return None


class TablePopulationCollector:
    """Population-mode batches of a logit table: every context of every member, exact rewards scored by
    the env once (the first batch, :func:`agents.rollout.collect_population`), then
    ``L_old[m, c] = log_softmax(z[m, c])`` from the table; the batch equals the generic path's."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._scored: Population | None = None

    def __call__(self, callback: BaseCallback) -> Population | None:
        model = self.model
        policy = model.policy
        policy.set_training_mode(False)
        callback.on_rollout_start()
        if self._scored is None:
            self._scored = collect_population(model.vector_env, policy, exhaustive=True,
                                              n_members=model.n_seeds)
            old_log_probs = self._scored.old_log_probs
        else:
            with th.no_grad():
                old_log_probs = policy.all_log_probs().reshape(-1, policy.n_actions)
        model.num_timesteps += model.vector_env.num_envs // model.n_seeds
        callback.update_locals({"self": model})
        if not callback.on_step():
            return None
        batch = Population(self._scored.obs, self._scored.rewards, old_log_probs)
        model.record_batch(batch)
        callback.on_rollout_end()
        return batch


class TableSingleCollector:
    """Single-mode batches of a one-context logit table: member m's B actions drawn from its row of
    ``pi = softmax(z[m, 0])``, the rewards ``r[a]`` of the arms scored by the env once; the batch,
    the monitor rows and the ``rollout/`` values equal the generic path's."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._arm_rewards: th.Tensor | None = None  # [S, A]

    def _rewards_of_arms(self) -> th.Tensor:
        """Every arm's reward for each member's context, from the env's ``score_candidates``."""
        model = self.model
        env, n_arms = model.vector_env, int(model.action_space.n)
        env.reset(options={"group_size": 1})
        arms = np.ascontiguousarray(np.broadcast_to(np.arange(n_arms), (env.num_envs, n_arms)))
        scores = th.as_tensor(env.score_candidates(arms), dtype=th.float32, device=model.device)
        return scores.reshape(model.n_seeds, -1, n_arms)[:, 0]

    def __call__(self, callback: BaseCallback) -> Episodes | None:
        model = self.model
        policy = model.policy
        policy.set_training_mode(False)
        callback.on_rollout_start()
        if self._arm_rewards is None:
            self._arm_rewards = self._rewards_of_arms()
        n_members, per_member = model.n_seeds, model.mode.n_envs
        with th.no_grad():
            table = policy.all_log_probs().reshape(n_members, -1)  # [S, A]: the one context
            actions = multinomial_rows(table, per_member, policy.member_generators)  # [S, B]
        rewards = self._arm_rewards.gather(1, actions).reshape(-1, 1)
        n = n_members * per_member
        model.num_timesteps += per_member
        callback.update_locals({"self": model})
        if not callback.on_step():
            return None
        old_log_probs = table.unsqueeze(1).expand(n_members, per_member, -1).reshape(n, 1, -1)
        batch = Episodes(
            obs=th.full((n, 1), policy.obs_start, dtype=th.int64, device=model.device),
            actions=actions.reshape(n, 1),
            old_log_probs=old_log_probs,
            token_rewards=rewards,
            returns=rewards[:, 0].clone(),
            contexts=th.zeros(n, dtype=th.int64, device=model.device),
            n_contexts=n,
            group_size=1,
        )
        model.record_batch(batch)
        callback.on_rollout_end()
        return batch
