"""The fast collectors of the small policies: the generic collector's batches from fewer env and policy calls.

The generic path (``GroupAlgorithm.collect``) asks the env for every batch: in exact mode it resets
every sub-env to its context, scores every action through the env (numpy), gathers the policy's
log-probabilities row by row and wraps them in a batch. For a logit table in exact mode all of
that is the same at every update but the log-probabilities: the contexts are every context of the
table, and the exact rewards ``r[c, a]`` of a tabular env are fixed (its correct arms are). So a
:class:`TableExactCollector` scores the env once, at the first update, through the generic
``collect_exact``, and afterwards builds each batch from the table alone:
``L_old = log_softmax(z)`` for every member and context, the cached rewards and observations.

In single mode on a one-context table (the k-armed bandit, paper Sec. 3.1) the generic path steps B
sub-envs per member and samples each row's action from that row's copy of the one distribution;
:class:`TableSingleCollector` draws each member's B actions from its one row of ``pi = softmax(z)``
(inverse CDF, the member's generator: the same uniforms, so the same actions), reads the rewards
from the arms' rewards, scored by the env once, and hands the single mode a ``TableSamples`` batch:
each member's one row ``[S, A]`` instead of the generic batch's ``[S*B, A]`` copies of it, which the
mode's views gather from.

On images (the MLP on MNIST, single and exact modes) the generic path resets the env, which
copies the drawn images out of the data set, and steps it (the one-step episodes autoreset, which copies
a second, unused set). :class:`ImageCollector` draws the contexts from the env's own member streams as
those resets do (``draw_contexts``: the same image indices) and gathers the images from the data set as
one tensor.

The exact-table and image collectors forward once, with gradient: pi_old is that forward detached, and
they hand the forward itself to the update's first epoch (``first_forward``, :mod:`tpo_agents.modes.base`).
A second forward would gather every row of the normalised table again and add its gradient back row by
row (a quarter more CPU time per 100-member exact update of the multi-context bandit), or forward the MLP
again (about a fifth of a 20-member step). The one-context table's single-mode collector writes pi_old without
gradient: the update's forward of its ``[S, A]`` rows costs 1-3% of an update.

The update itself is the generic one (``GroupAlgorithm.train``: the algorithm's own loss from
``tpo_agents.losses`` on the mode's views); with a fast collector the learn loop computes the batch's
``rollout/`` values only for updates whose logs are written (every ``log_interval``) or when a callback asks
for them (``tpo_agents.learn_loop.wants_rollout_metrics``); on every path, fast or generic, it computes the
``train/`` diagnostics (the loss's stats, the gradient norm, the KL to pi_old) on the same terms
(``tpo_agents.learn_loop.wants_train_diagnostics``). Each collector registers
itself (:func:`tpo_agents.modes.base.register_fast_collector`) for what its ``serves`` says; everything else
(multi-context tables in single mode, the transformer, text) goes the generic collector, which stays the
reference: ``tests/tpo_agents/test_fast_collectors.py`` holds the two equal.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from tpo_agents.modes import CollectionMode
from tpo_agents.modes.base import FastCollector, StepHook, register_fast_collector
from tpo_agents.modes.episodes import Episodes
from tpo_agents.modes.exact import ExactBatch, collect_exact
from tpo_agents.modes.single import TableSamples
from tpo_agents.policies.base import multinomial_rows
from tpo_agents.policies.mlp import MlpSoftmaxPolicy
from tpo_agents.policies.tabular import TabularSoftmaxPolicy
from tpo_gym.envs.mnist import MNISTBanditVectorEnv


def _table(policy: Any, mode: CollectionMode) -> bool:
    """A logit table over a ``Discrete`` context index."""
    return isinstance(policy, TabularSoftmaxPolicy) and isinstance(mode.observation_space, spaces.Discrete)


@register_fast_collector
class ImageCollector(FastCollector):
    """Batches of the MLP on MNIST in single mode (B images per member, one sampled guess each) or
    exact mode (B images, every guess scored): the images of the env's own context draws,
    gathered from the data set, forwarded once; the batch equals the generic path's."""

    @classmethod
    def serves(cls, env: VectorEnv, policy: Any, mode: CollectionMode) -> bool:
        return (isinstance(policy, MlpSoftmaxPolicy) and isinstance(env.unwrapped, MNISTBanditVectorEnv)
                and mode.name in ("single", "exact"))

    def __init__(self, env: VectorEnv, policy: Any, mode: CollectionMode) -> None:
        super().__init__(env, policy, mode)
        images, labels = env.unwrapped.dataset()
        with warnings.catch_warnings():  # the data set is read-only; it is only ever indexed
            warnings.simplefilter("ignore", UserWarning)
            self.images = th.from_numpy(images).to(policy.device)
            self.labels = th.from_numpy(labels).to(policy.device)
        self.pixel_bytes = pixel_bytes(self.images)
        self.single = mode.name == "single"
        self._started = False

    def _images(self, contexts: th.Tensor) -> th.Tensor:
        """The images of ``contexts``: gathered as bytes and divided by 255 where the data set is bytes
        / 255 (a quarter of the memory traffic, the same float32 values), else gathered as they are."""
        if self.pixel_bytes is None:
            return self.images.index_select(0, contexts)
        return self.pixel_bytes.index_select(0, contexts).float().div_(255.0)

    def _contexts(self) -> th.Tensor:
        """The image indices the generic path's reset would draw: the first batch resets the env (its
        streams start there), later batches draw from the streams without copying images; in single
        mode the autoreset of the one-step episodes draws a second set, which is drawn too (unused)."""
        env = self.env
        if self._started:
            contexts = env.unwrapped.draw_contexts()
        else:
            env.reset(options={"group_size": 1} if self.single else None)
            contexts, self._started = np.array(env.unwrapped.contexts), True
        if self.single:
            env.unwrapped.draw_contexts()
        return th.as_tensor(contexts, device=self.policy.device)

    def __call__(self, on_step: StepHook) -> Episodes | ExactBatch | None:
        policy = self.policy
        contexts = self._contexts()
        images, labels = self._images(contexts), self.labels.index_select(0, contexts)
        n = len(contexts)
        log_probs = policy.action_log_probs(images)  # with gradient: the update's first forward, handed over
        old_log_probs = log_probs.detach()  # pi_old: sampled from, and read by exact mode's task error
        if self.single:
            actions = multinomial_rows(old_log_probs, 1, policy.member_generators)  # [N, 1]
            rewards = (actions == labels.unsqueeze(1)).float()
        if not on_step(n):
            return None
        if self.single:
            return Episodes(
                obs=images.unsqueeze(1), actions=actions, old_log_probs=old_log_probs.unsqueeze(1),
                token_rewards=rewards, returns=rewards[:, 0].clone(), contexts=contexts, n_contexts=n,
                group_size=1, first_forward=log_probs.unsqueeze(1),
            )  # fmt: skip
        scores = (th.arange(old_log_probs.shape[-1], device=policy.device) == labels.unsqueeze(1)).float()
        return ExactBatch(images, scores, old_log_probs, first_forward=log_probs)


@register_fast_collector
class TableExactCollector(FastCollector):
    """Exact-mode batches of a logit table: every context of every member, exact rewards scored by
    the env once (the first batch, :func:`tpo_agents.modes.exact.collect_exact`), and
    ``L[m, c] = log_softmax(z[m, c])`` from the table, forwarded once with gradient (pi_old is it detached);
    the batch equals the generic path's."""

    @classmethod
    def serves(cls, env: VectorEnv, policy: Any, mode: CollectionMode) -> bool:
        return _table(policy, mode) and mode.name == "exact"

    def __init__(self, env: VectorEnv, policy: Any, mode: CollectionMode) -> None:
        super().__init__(env, policy, mode)
        self._scored: ExactBatch | None = None

    def __call__(self, on_step: StepHook) -> ExactBatch | None:
        policy = self.policy
        if self._scored is None:
            self._scored = collect_exact(self.env, policy, exhaustive=True, n_seeds=self.mode.n_seeds)
        # every row once, in the batch's order, with gradient: the update's first forward, handed over
        log_probs = policy.all_log_probs().reshape(-1, policy.n_actions)
        if not on_step(self.env.num_envs):
            return None
        return ExactBatch(self._scored.obs, self._scored.rewards, log_probs.detach(), first_forward=log_probs)


@register_fast_collector
class TableSingleCollector(FastCollector):
    """Single-mode batches of a one-context logit table: member m's B actions drawn from its row of
    ``pi = softmax(z[m, 0])``, the rewards ``r[a]`` of the arms scored by the env once; the batch,
    the monitor rows and the ``rollout/`` values equal the generic path's."""

    @classmethod
    def serves(cls, env: VectorEnv, policy: Any, mode: CollectionMode) -> bool:
        return _table(policy, mode) and mode.name == "single" and mode.observation_space.n == 1

    def __init__(self, env: VectorEnv, policy: Any, mode: CollectionMode) -> None:
        super().__init__(env, policy, mode)
        self._arm_rewards: th.Tensor | None = None  # [S, A]

    def _rewards_of_arms(self) -> th.Tensor:
        """Every arm's reward for each member's context, from the env's ``score_candidates``."""
        env, n_arms = self.env, int(self.env.single_action_space.n)
        env.reset(options={"group_size": 1})
        arms = np.ascontiguousarray(np.broadcast_to(np.arange(n_arms), (env.num_envs, n_arms)))
        scores = th.as_tensor(env.score_candidates(arms), dtype=th.float32, device=self.policy.device)
        return scores.reshape(self.mode.n_seeds, -1, n_arms)[:, 0]

    def __call__(self, on_step: StepHook) -> TableSamples | None:
        policy = self.policy
        if self._arm_rewards is None:
            self._arm_rewards = self._rewards_of_arms()
        n_seeds, per_member = self.mode.n_seeds, self.mode.n_envs
        with th.no_grad():
            old_log_probs = policy.all_log_probs().reshape(n_seeds, -1)  # [S, A]
        actions = multinomial_rows(old_log_probs, per_member, policy.member_generators)  # [S, B]
        rewards = self._arm_rewards.gather(1, actions).reshape(-1, 1)
        if not on_step(n_seeds * per_member):
            return None
        return TableSamples(actions, rewards, rewards[:, 0].clone(), old_log_probs)


PIXEL_CHUNK_ROWS = 4096
"""Rows of images :func:`pixel_bytes` converts at a time."""

_PIXEL_BYTES: dict[tuple[int, tuple[int, ...], tuple[int, ...]], tuple[th.Tensor, th.Tensor | None]] = {}
"""The last :func:`pixel_bytes` answers, by the images' memory (holding the images keeps it theirs)."""


def pixel_bytes(images: th.Tensor) -> th.Tensor | None:
    """The uint8 pixels ``b`` of float32 ``images`` that are exactly ``b / 255`` in float32 (MNIST as
    ``tpo_gym.data.load_mnist`` reads it), or None for images that are not; ``b.float() / 255`` gives
    ``images`` back bit for bit (float32 division is correctly rounded). Computed once per data set
    and process (a pass over the 60,000 training images costs ~0.4 s)."""
    key = (images.data_ptr(), tuple(images.shape), tuple(images.stride()))
    if key in _PIXEL_BYTES:
        return _PIXEL_BYTES[key][1]
    raw: th.Tensor | None = None
    if images.dtype == th.float32 and images.dim() and images.numel():
        raw = th.empty(images.shape, dtype=th.uint8, device=images.device)
        for start in range(0, len(images), PIXEL_CHUNK_ROWS):  # in chunks: no full-size float temporaries
            part, out = images[start:start + PIXEL_CHUNK_ROWS], raw[start:start + PIXEL_CHUNK_ROWS]
            scaled = part.mul(255.0).round_()
            lo, hi = th.aminmax(scaled)
            in_range = 0 <= float(lo) and float(hi) <= 255
            if not (in_range and th.equal(out.copy_(scaled).float().div_(255.0), part)):
                raw = None
                break
    if len(_PIXEL_BYTES) >= 2:
        _PIXEL_BYTES.pop(next(iter(_PIXEL_BYTES)))
    _PIXEL_BYTES[key] = (images, raw)
    return raw
