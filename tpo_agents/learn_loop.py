"""The shared learn loop of every grouped algorithm: collect groups -> epochs of a loss -> log.

:class:`GroupAlgorithm` is the loop only (SB3's ``on_policy_algorithm.py``); the settings, the
collection mode, the owned env, populations, ``load`` and ``predict`` are those of
:class:`tpo_agents.base_class.GroupBaseAlgorithm`.
A subclass states its hyperparameters and its loss on one or more views of a batch (``group_loss``,
``sample_loss``, ``exact_loss``); the mode decides which view it gets.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.utils import safe_mean

from tpo_agents.base_class import GroupBaseAlgorithm
from tpo_agents.callback_steps import warn_never_firing
from tpo_agents.modes import Collector, View
from tpo_agents.without_signal import warn_without_signal

__all__ = ["GroupAlgorithm"]

#: Diagnostics logged from the last epoch when there are several (0 by construction at the first, where
#: pi = pi_old: not logged for one-epoch updates).
LAST_EPOCH_STATS = ("clip_fraction",)

#: The algorithm's method for each kind of view (``View.kind``).
LOSS_OF_VIEW = {"group": "group_loss", "sample": "sample_loss", "exact": "exact_loss"}


class GroupAlgorithm(GroupBaseAlgorithm):
    """The learn loop of TPO, GRPO, DG, PPO, PG, Group PG and CE: collect a batch of groups in the
    algorithm's collection mode, take ``n_epochs`` optimizer steps of its loss on it, log; repeat.
    The constructor's parameters are :class:`~tpo_agents.base_class.GroupBaseAlgorithm`'s."""

    def learn(
        self,
        total_timesteps: int | None = None,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str | None = None,
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
        n_iterations: int | None = None,
    ) -> GroupAlgorithm:
        """Collect a batch of groups, take ``n_epochs`` optimizer steps on it, log; repeat.

        Give ``total_timesteps`` (env interactions, SB3's budget; of each member, with ``n_seeds > 1``)
        or ``n_iterations`` (an exact number of updates: collect + train cycles, SB3's
        ``time/iterations``), not both.
        """
        if (total_timesteps is None) == (n_iterations is None):
            raise ValueError("learn() takes total_timesteps or n_iterations (exactly one of them)")
        if self.env is None:
            raise ValueError("this model has no env: load it with env=<id> or call set_env(<id>) first")
        if n_iterations is not None:
            if not isinstance(n_iterations, int) or n_iterations < 1:
                raise ValueError(f"n_iterations must be a positive integer, got {n_iterations!r}")
            total_timesteps = n_iterations * self.mode.steps_per_collect(self.vector_env)
        iteration = 0
        total_timesteps, callback = self._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name or type(self).__name__, progress_bar
        )
        warn_never_firing(self, callback, total_timesteps - self.num_timesteps, stacklevel=3)
        without_signal_before = self.batches_without_signal
        collector = self.collector()
        every_update = wants_train_diagnostics(callback)
        every_rollout = not collector.fast or wants_rollout_metrics(callback)
        callback.on_training_start(locals(), globals())
        while self.num_timesteps < total_timesteps and (n_iterations is None or iteration < n_iterations):
            logged = log_interval > 0 and (iteration + 1) % log_interval == 0
            batch = self.collect(callback, collector, rollout_metrics=every_rollout or logged)
            if batch is None:
                break
            self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
            self.train(batch, diagnostics=every_update or logged)
            self.record_episodes()
            iteration += 1
            if logged:
                self._dump_logs(iteration)
        callback.on_training_end()
        warn_without_signal(iteration, self.batches_without_signal - without_signal_before)
        return self

    def collect(self, callback: BaseCallback, collector: Collector | None = None,
                rollout_metrics: bool = True) -> Any:
        """One batch from ``collector`` (default: the generic one, the mode's own collection); None if a
        callback stopped training.

        The batch's ``rollout/`` metrics (with ``rollout_metrics``) are recorded before
        ``callback.on_rollout_end()``, so a callback can read them from ``model.logger.name_to_value``
        there (the policy is not yet updated).
        """
        collector = collector or self.collector(fast=False)
        self.policy.set_training_mode(False)
        callback.on_rollout_start()
        batch = collector(lambda interactions: self.count_interactions(callback, interactions))
        if batch is None:
            return None
        self.record_batch(batch, rollout_metrics)
        callback.on_rollout_end()
        return batch

    def count_interactions(self, callback: BaseCallback, n_interactions: int) -> bool:
        """After an env step of ``n_interactions`` (all members'): count each member's own, let the
        callbacks see the step; False when one of them stops training."""
        self.num_timesteps += n_interactions // self.n_seeds
        callback.update_locals({"self": self})
        return callback.on_step()

    def record_batch(self, batch: Any, rollout_metrics: bool = True) -> None:
        """Record a collected batch: its ``rollout/`` values (the members' means; per member in
        :attr:`member_rollout`; none without ``rollout_metrics``) and its episodes' ``monitor.csv`` rows,
        which :meth:`record_episodes` counts and writes once the batch is trained on."""
        self.member_rollout = {}
        if rollout_metrics:
            self.member_rollout = self.mode.log_rollout(self.logger, batch) or {}
        rows = self.mode.episode_rows(batch)
        if rows is not None and self.n_seeds > 1:
            rows["member"] = np.repeat(np.arange(self.n_seeds), len(rows["r"]) // self.n_seeds)
        self._untrained_episodes = rows

    def record_episodes(self) -> None:
        """Count the episodes of the batch just trained on and write their ``monitor.csv`` rows. A run
        stopped before the update (Ctrl-C during the collection or the update) leaves them out, as its
        saved ``num_timesteps`` leaves out their steps (:class:`tpo_agents.zoo.callbacks.TrainedSteps`)."""
        rows, self._untrained_episodes = self._untrained_episodes, None
        if rows is None:
            return
        self._episode_num += len(rows["r"])
        if self._monitor is not None:
            self._monitor.write(rows)

    def train(self, batch: Any, diagnostics: bool = True) -> None:
        """``n_epochs`` full-batch optimizer steps on one batch, targets and old log-probs frozen.

        A mode may split a batch into parts of whole groups (the text mode's micro-batches); each
        part's loss is weighted by its share of the batch and the gradients accumulate, so one
        optimizer step sees the full-batch gradient. Logged stats are the parts' weighted means.
        A batch in which no group carries signal (:meth:`~tpo_agents.modes.CollectionMode.has_signal`) is
        counted (``train/batches_without_signal``) and, with ``skip_batches_without_signal``, not trained
        on. ``diagnostics=False`` skips the ``train/`` diagnostics (the loss's stats, the gradient norm, the
        KL to pi_old after the update), which change no parameter: the learn loop computes them for logged
        updates only, and for every update where a callback asks (:func:`wants_train_diagnostics`).
        """
        if not self.mode.has_signal(batch, self._view):
            self.batches_without_signal += 1
            self.logger.record("train/batches_without_signal", self.batches_without_signal)
            if self.skip_batches_without_signal:
                return
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        for name in self.schedules:
            self.logger.record(f"train/{name}", self.scheduled(name))
        start = time.perf_counter()
        for epoch in range(self.n_epochs):
            self.policy.optimizer.zero_grad()
            stats, loss = self._accumulate_gradients(batch, epoch == 0, diagnostics)
            if epoch == 0:
                if diagnostics:
                    stats["grad_norm"] = _global_grad_norm(self.policy.parameters(), self.n_seeds)
                first_stats = stats
            if self.max_grad_norm is not None:
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
        seconds = max(time.perf_counter() - start, 1e-9)  # the epochs' forwards, backwards and steps
        if diagnostics:
            self._record_diagnostics(batch, first_stats, stats)
        self.mode.after_update(self.policy)
        self.mode.log_update(self.logger, batch)
        self._n_updates += self.n_epochs
        self.logger.record("train/loss", loss)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        tokens = self.mode.train_tokens(batch)
        if tokens is not None:
            self.logger.record("time/train_tokens_per_s", self.n_epochs * tokens / seconds)

    def _record_diagnostics(self, batch: Any, first_stats: dict[str, float],
                            last_stats: dict[str, float]) -> None:
        """Record the ``train/`` diagnostics of an update: the first epoch's stats, :data:`LAST_EPOCH_STATS`
        from the last epoch when there are several, and ``approx_kl`` (:meth:`kl_after_update`)."""
        stats = {key: value for key, value in first_stats.items() if key not in LAST_EPOCH_STATS}
        if self.n_epochs > 1:
            stats.update({key: last_stats[key] for key in LAST_EPOCH_STATS if key in last_stats})
        stats["approx_kl"] = self.kl_after_update(batch)
        for key, value in stats.items():
            self.logger.record(f"train/{key}", float(value))

    @th.no_grad()
    def kl_after_update(self, batch: Any) -> float:
        """KL(pi_old || pi_theta) at the parameters after the update's last optimizer step, the mode's
        estimate (:meth:`~tpo_agents.modes.CollectionMode.approx_kl`) weighted over the batch's parts:
        sum_parts w_part KL_part, from one forward without gradient. Unlike a KL taken during the epochs,
        it moves with a single epoch (at the first epoch's forward pi_theta = pi_old and the KL is 0)."""
        return sum(weight * float(self.mode.approx_kl(part, self.mode.log_probs(self.policy, part)))
                   for part, weight in self.mode.parts(batch))

    def _accumulate_gradients(self, batch: Any, first_epoch: bool = True,
                              diagnostics: bool = True) -> tuple[dict[str, float], float]:
        """Backward of the loss over the batch's parts; returns (stats, loss), weighted by their shares.
        The first epoch's forward, at theta_old, gives pi_old where collection left it unwritten
        (:meth:`~tpo_agents.modes.CollectionMode.keep_old_log_probs`); with ``kl_coef`` the first epoch also
        writes the reference model's log-probabilities, which every epoch's KL reads."""
        stats: dict[str, float] = {}
        total_loss = 0.0
        for part, weight in self.mode.parts(batch):
            log_probs = self.mode.log_probs(self.policy, part, first_epoch)
            if first_epoch:
                self.mode.keep_old_log_probs(part, log_probs)
                if self.kl_coef:
                    self.mode.keep_reference_log_probs(self.policy, part)
            loss, part_stats = self.loss(self.mode.view(self._view, part, log_probs), diagnostics)
            if self.kl_coef:
                kl_ref = self.mode.reference_kl(part, log_probs)
                part_stats["reference_kl"] = kl_ref.detach()
                loss = loss + self.kl_coef * kl_ref
            (loss * (weight * self.n_seeds)).backward()  # summed over members: each its own gradient
            total_loss += weight * float(loss.detach())
            for key, value in part_stats.items():
                stats[key] = stats.get(key, 0.0) + weight * float(value)
        return stats, total_loss

    # -------------------------------------------------------------------------- algorithm hooks
    def loss(self, view: View, diagnostics: bool = True) -> tuple[th.Tensor, dict[str, Any]]:
        """The algorithm's loss on ``view`` and its stats: ``group_loss``, ``sample_loss`` or ``exact_loss``
        by the view's ``kind`` (a subclass defines those of :meth:`loss_views`), a function of the view and
        the hyperparameters. The stats (tensors or floats; none without ``diagnostics``) are logged under
        ``train/`` from the first epoch, except LAST_EPOCH_STATS (measured at the start of the last epoch;
        not logged with one epoch)."""
        return getattr(self, LOSS_OF_VIEW[view.kind])(view, diagnostics)

    # ------------------------------------------------------------------------------- logging
    def _dump_logs(self, iteration: int) -> None:
        elapsed = max((time.time_ns() - self.start_time) / 1e9, sys.float_info.epsilon)
        fps = (self.num_timesteps - self._num_timesteps_at_start) / elapsed  # not SB3's int: LLMs run < 1/s
        self.logger.record("time/iterations", iteration, exclude="tensorboard")
        self.logger.record("time/fps", fps)
        self.logger.record("time/time_elapsed", int(elapsed), exclude="tensorboard")
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        if self.ep_info_buffer:
            self.logger.record("rollout/ep_rew_mean", safe_mean([ep["r"] for ep in self.ep_info_buffer]))
        self.logger.dump(step=self.num_timesteps)


def _asks(callback: BaseCallback | None, flag: str) -> bool:
    """Whether ``callback`` or one it chains (``CallbackList``, an event callback's child) sets ``flag``."""
    if callback is None:
        return False
    if getattr(callback, flag, False):
        return True
    children = [*getattr(callback, "callbacks", []), getattr(callback, "callback", None)]
    return any(_asks(child, flag) for child in children if isinstance(child, BaseCallback))


def wants_train_diagnostics(callback: BaseCallback | None) -> bool:
    """Whether ``callback`` (or one it chains) reads the ``train/`` diagnostics of every update: it says
    so with ``wants_train_diagnostics = True``."""
    return _asks(callback, "wants_train_diagnostics")


def wants_rollout_metrics(callback: BaseCallback | None) -> bool:
    """Whether ``callback`` (or one it chains) reads every batch's ``rollout/`` values (the logger's, or
    ``model.member_rollout``): it says so with ``wants_rollout_metrics = True``."""
    return _asks(callback, "wants_rollout_metrics")


def _global_grad_norm(parameters: Any, n_seeds: int = 1) -> float:
    """The L2 norm of all gradients, ``sqrt(sum_p ||g_p||^2)`` from each parameter's own norm (no copy of
    the gradients: a language model's are hundreds of MB); of a population, the mean over members of each
    member's norm."""
    norms = [th.linalg.vector_norm(p.grad.detach().reshape(n_seeds, -1), dim=1)
             for p in parameters if p.grad is not None]  # fmt: skip
    if not norms:
        return 0.0
    return float(th.linalg.vector_norm(th.stack(norms), dim=0).mean())
