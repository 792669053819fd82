"""The shared learn loop of every grouped algorithm: collect groups -> epochs of a loss -> log.

``GroupAlgorithm`` follows Stable-Baselines3's ``BaseAlgorithm`` contract (``learn``, ``predict``,
``save``, ``load``, callbacks, logger, TensorBoard). A subclass only states its hyperparameters,
the collection modes it supports, and two methods:

* ``prepare(batch)``: everything frozen from the rollout snapshot (targets q, advantages), no grad;
* ``loss(batch, frozen, log_probs)``: the loss on the current log-probs, plus diagnostics.

Views of a batch shared by all algorithms live here (``group_view``, ``sample_view``), so the
algorithm files hold only their loss.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, ClassVar

import gymnasium as gym
import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.utils import FloatSchedule, safe_mean
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper, VecMonitor

import tpo_gym  # noqa: F401  (registers the TPO/ envs)
from agents import losses
from agents.policies import MlpPolicy, TabularPolicy, TransformerPolicy
from agents.rollout import (
    Episodes,
    Population,
    TokenGroups,
    collect_episodes,
    collect_population,
    collect_token_groups,
    episode_log_probs,
)
from tpo_gym.sb3 import SB3VecEnv

GROUP_MODES = ("token", "sequence", "single", "population")
MATCHES = ("prompts", "interactions")
Batch = Episodes | TokenGroups | Population

_VEC_ONLY_KWARGS = ("num_envs", "vectorization_mode", "max_episode_steps", "render_mode")


def env_id_and_kwargs(env: str | gym.Env | VecEnv | gym.vector.VectorEnv) -> tuple[str, dict[str, Any]]:
    """The registered id and make() kwargs of an env given as an id, a Gymnasium env or a VecEnv."""
    if isinstance(env, str):
        return env, {}
    spec = env.get_attr("spec", indices=[0])[0] if isinstance(env, VecEnv) else getattr(env, "spec", None)
    if spec is None:
        raise ValueError(
            f"cannot tell which env {env!r} is: pass a registered id such as 'TPO/TokenReversal-v0' "
            "or an env made by gymnasium.make / gymnasium.make_vec / tpo_gym.sb3.make_sb3_vec_env"
        )
    kwargs = {k: v for k, v in (spec.kwargs or {}).items() if k not in _VEC_ONLY_KWARGS}
    return spec.id, kwargs


class GroupAlgorithm(BaseAlgorithm):
    """Base of TPO, GRPO, DG, PPO and PG: critic-free, learns from groups of scored candidates.

    :param policy: ``"TransformerPolicy"`` (token tasks), ``"MlpPolicy"`` (MNIST), ``"TabularPolicy"``
        (bandits) or a policy class.
    :param env: a registered id or an env made from one; the algorithm builds its own natively batched
        env of the size it needs (``batch_size`` contexts x ``group_size`` episodes in sequence mode).
    :param learning_rate: effective learning rate (float or schedule); 1e-3 is the paper's transformer rate.
    :param batch_size: B, contexts (prompts, images) per update.
    :param group_size: K, candidates per context (next tokens in token mode, episodes in sequence mode).
    :param n_epochs: optimizer steps on each batch, with targets and old log-probs frozen.
    :param group_mode: ``token``, ``sequence``, ``single`` or ``population`` (see ``agents.rollout``).
    :param match: ``prompts`` or ``interactions``; interaction matching gives single-sample methods
        B*K contexts and the learning rate times sqrt(K) (spec 5).
    :param baseline: single mode only: ``"batch_mean"`` (per-position batch mean, spec 2.1),
        ``"expected"`` (sum_k pi_k^2, the MNIST baseline, spec 2.5) or a constant (0.5 in the tabular runs).
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "TransformerPolicy": TransformerPolicy,
        "MlpPolicy": MlpPolicy,
        "TabularPolicy": TabularPolicy,
    }
    group_modes: ClassVar[tuple[str, ...]] = GROUP_MODES
    grouped: ClassVar[bool] = True
    policy: Any

    def __init__(
        self,
        policy: str | type[BasePolicy],
        env: str | gym.Env | VecEnv | None,
        learning_rate: float | Any = 1e-3,
        batch_size: int = 100,
        group_size: int = 8,
        n_epochs: int = 4,
        group_mode: str | None = None,
        match: str = "prompts",
        baseline: str | float = "batch_mean",
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        _init_setup_model: bool = True,
    ) -> None:
        self.env_id, self.env_kwargs = env_id_and_kwargs(env) if env is not None else (None, {})
        super().__init__(
            policy=policy,
            env=env,
            learning_rate=learning_rate,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            support_multi_env=True,
            monitor_wrapper=False,
            seed=seed,
            supported_action_spaces=(spaces.Discrete,),
        )
        self.batch_size = batch_size
        self.group_size = group_size
        self.n_epochs = n_epochs
        self.group_mode = group_mode or self.group_modes[0]
        self.match = match
        self.baseline = baseline
        self._validate()
        if _init_setup_model:
            self._setup_model()

    # ----------------------------------------------------------------------------------- setup
    def _validate(self) -> None:
        if self.group_mode not in self.group_modes:
            raise ValueError(
                f"{type(self).__name__} does not support group_mode={self.group_mode!r}; "
                f"choose one of {list(self.group_modes)}"
            )
        if self.match not in MATCHES:
            raise ValueError(f"match={self.match!r} is not one of {list(MATCHES)}")
        for name in ("batch_size", "group_size", "n_epochs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not (self.baseline in ("batch_mean", "expected") or isinstance(self.baseline, int | float)):
            raise ValueError(f"baseline={self.baseline!r}: use 'batch_mean', 'expected' or a number")

    @property
    def interaction_matched(self) -> bool:
        """True when a single-sample method is scaled up to the grouped methods' interactions."""
        return self.match == "interactions" and self.group_mode == "single"

    def _n_collect_envs(self) -> int:
        if self.group_mode == "sequence":
            return self.batch_size * self.group_size
        if self.group_mode == "population":
            return self.n_tabular_contexts() or self.batch_size
        return self.batch_size * (self.group_size if self.interaction_matched else 1)

    def n_tabular_contexts(self) -> int | None:
        """Number of contexts of a tabular env (its Discrete observation size), else None.

        Population mode enumerates them all; on other envs it draws ``batch_size`` contexts.
        """
        if isinstance(self.observation_space, spaces.Discrete):
            return int(self.observation_space.n)
        return None

    def _setup_lr_schedule(self) -> None:
        scale = math.sqrt(self.group_size) if self.interaction_matched else 1.0
        base = FloatSchedule(self.learning_rate)
        self.lr_schedule = _ScaledSchedule(base, scale)

    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        if self.env is not None:
            self._build_group_env()
        self.policy = self.policy_class(
            self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs
        ).to(self.device)

    def _build_group_env(self) -> None:
        """Replace ``self.env`` by the natively batched env this algorithm collects from."""
        if self.env_id is None:
            self.env_id, self.env_kwargs = env_id_and_kwargs(self.env)
        n = self._n_collect_envs()
        current = self.env
        self._monitor = _find_monitor(current)
        if isinstance(current, SB3VecEnv) and current.num_envs == n:
            return
        vector_env = gym.make_vec(
            self.env_id, num_envs=n, vectorization_mode="vector_entry_point", **self.env_kwargs
        )
        self.env = SB3VecEnv(vector_env)
        self.n_envs = n
        if self.seed is not None:
            self.env.seed(self.seed)

    def set_env(self, env: gym.Env | VecEnv, force_reset: bool = True) -> None:
        """Point the algorithm at ``env`` (its id and kwargs); it then rebuilds its own batched env."""
        self.env_id, self.env_kwargs = env_id_and_kwargs(env)
        self.env = env
        self._build_group_env()
        if force_reset:
            self._last_obs = None

    @property
    def vector_env(self) -> gym.vector.VectorEnv:
        """The Gymnasium vector env behind ``self.env``."""
        return self.env.vector_env

    # ----------------------------------------------------------------------------------- loop
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

        Give ``total_timesteps`` (env interactions, SB3's budget) or ``n_iterations`` (an exact number
        of updates: collect + train cycles, SB3's ``time/iterations``), not both.
        """
        if (total_timesteps is None) == (n_iterations is None):
            raise ValueError("learn() takes total_timesteps or n_iterations (exactly one of them)")
        if n_iterations is not None:
            if not isinstance(n_iterations, int) or n_iterations < 1:
                raise ValueError(f"n_iterations must be a positive integer, got {n_iterations!r}")
            total_timesteps = n_iterations * self.interactions_per_iteration()
        iteration = 0
        total_timesteps, callback = self._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name or type(self).__name__, progress_bar
        )
        callback.on_training_start(locals(), globals())
        while self.num_timesteps < total_timesteps and (n_iterations is None or iteration < n_iterations):
            batch = self.collect(callback)
            if batch is None:
                break
            self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
            self.train(batch)
            iteration += 1
            if log_interval > 0 and iteration % log_interval == 0:
                self._dump_logs(iteration)
        callback.on_training_end()
        return self

    def interactions_per_iteration(self) -> int:
        """Env interactions (``num_timesteps``) that one collection adds."""
        if self.group_mode == "population":
            return self.vector_env.num_envs
        return self.vector_env.num_envs * self.vector_env.unwrapped.task.horizon

    def collect(self, callback: BaseCallback) -> Batch | None:
        """One batch of groups in this algorithm's mode; None if a callback stopped training.

        The batch's ``rollout/`` metrics are recorded before ``callback.on_rollout_end()``, so a
        callback can read them from ``model.logger.name_to_value`` there (the policy is not yet updated).
        """
        self.policy.set_training_mode(False)
        callback.on_rollout_start()

        def on_step(n_interactions: int) -> bool:
            self.num_timesteps += n_interactions
            callback.update_locals({"self": self})
            return callback.on_step()

        vector_env = self.vector_env
        if self.group_mode == "token":
            batch = collect_token_groups(vector_env, self.policy, self.group_size, on_step)
        elif self.group_mode == "population":
            batch = collect_population(
                vector_env, self.policy, exhaustive=self.n_tabular_contexts() is not None
            )
            batch = batch if on_step(vector_env.num_envs) else None
        else:
            group_size = self.group_size if self.group_mode == "sequence" else 1
            batch = collect_episodes(vector_env, self.policy, group_size, on_step)
        if batch is not None:
            self.log_rollout(batch)
            callback.on_rollout_end()
        return batch

    def train(self, batch: Batch) -> None:
        """``n_epochs`` full-batch optimizer steps on one frozen batch (spec 2.4)."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        with th.no_grad():
            frozen = self.prepare(batch)
        for epoch in range(self.n_epochs):
            log_probs = self.current_log_probs(batch)
            loss, stats = self.loss(batch, frozen, log_probs)
            self.policy.optimizer.zero_grad()
            loss.backward()
            if epoch == 0:
                stats["grad_norm"] = _global_grad_norm(self.policy.parameters())
                first_stats = stats
            self.policy.optimizer.step()
        self._n_updates += self.n_epochs
        first_stats["approx_kl"] = mean_kl(batch.old_log_probs, log_probs.detach())
        for key, value in first_stats.items():
            self.logger.record(f"train/{key}", float(value))
        self.logger.record("train/loss", float(loss.detach()))
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")

    def current_log_probs(self, batch: Batch) -> th.Tensor:
        """log pi_theta(.|x) for every state of the batch, with gradients ([N, T, A] or [N, A])."""
        if isinstance(batch, Population):
            return self.policy.action_log_probs(batch.obs)
        return episode_log_probs(self.policy, batch)

    # -------------------------------------------------------------------------- algorithm hooks
    def prepare(self, batch: Batch) -> dict[str, th.Tensor]:
        """Quantities frozen from the rollout snapshot (targets, advantages)."""
        raise NotImplementedError

    def loss(
        self, batch: Batch, frozen: dict[str, th.Tensor], log_probs: th.Tensor
    ) -> tuple[th.Tensor, dict]:
        """The loss to minimise on the current log-probs, and diagnostics for ``train/``."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------- views
    def group_view(self, batch: Batch, log_probs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """(group log-scores L [..., K], raw scores s [..., K]) of a batch, for the grouped losses.

        token:      L[b,t,i] = log pi(a_{t,i} | x_t), s = r_{t,i}                      -> [B, H, K]
        sequence:   L[b,i] = sum_t log pi(y_{i,t} | ...), s[b,i] = mean_t r[b,i,t]     -> [B, K]
        single:     the whole action set at each context, s = mean over the context's samples of
                    A * onehot(a) (spec 2.5, 2.6)                                      -> [C, A]
        population: the whole action set, s = the exact rewards r[n, a]                 -> [N, A]
        """
        if isinstance(batch, TokenGroups):
            return log_probs.gather(-1, batch.candidates), batch.scores
        if isinstance(batch, Population):
            return log_probs, batch.rewards
        if self.group_mode == "sequence":
            taken = log_probs.gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1).sum(-1)
            shape = (batch.n_contexts, batch.group_size)
            return taken.reshape(shape), batch.token_rewards.mean(-1).reshape(shape)
        return self._action_set_groups(batch, log_probs)

    def _action_set_groups(self, batch: Episodes, log_probs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """Single mode: each sample scores its action set with s = A * onehot(a) (spec 2.5).

        On a tabular env (a Discrete context index) the samples of one context form one group whose
        scores are their mean, S_k = (1/n_c) sum_i A_i 1[a_i = k] (spec 2.6); elsewhere (MNIST) every
        sample is its own group, even if two samples drew the same image.
        """
        first_logp = log_probs[:, 0]
        rewards = batch.token_rewards.sum(-1)
        advantages = self.single_advantages(batch, rewards)
        per_sample = losses.onehot_scores(batch.actions[:, 0], advantages, first_logp.shape[-1])
        if self.n_tabular_contexts() is None:
            return first_logp, per_sample
        unique, inverse = th.unique(batch.contexts, return_inverse=True)
        scores = per_sample.new_zeros(len(unique), per_sample.shape[-1]).index_add_(0, inverse, per_sample)
        counts = rewards.new_zeros(len(unique)).index_add_(0, inverse, th.ones_like(rewards))
        arange = th.arange(len(inverse), device=inverse.device)
        first = th.full_like(unique, len(inverse)).scatter_reduce_(0, inverse, arange, reduce="amin")
        return first_logp[first], scores / counts.unsqueeze(-1)

    def sample_view(self, batch: Episodes, log_probs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """(log pi(a_t|x_t) of the taken actions, per-token rewards), both [N, T], single-sample view."""
        taken = log_probs.gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)
        return taken, batch.token_rewards

    def baseline_values(self, batch: Episodes, rewards: th.Tensor) -> th.Tensor:
        """The baseline b subtracted from ``rewards`` ([N] or [N, T]) in single mode."""
        if self.baseline == "batch_mean":
            return rewards.mean(0, keepdim=True).expand_as(rewards)
        if self.baseline == "expected":
            b = losses.expected_baseline(batch.old_log_probs[:, 0])
            return b.reshape(-1, *([1] * (rewards.dim() - 1))).expand_as(rewards)
        return th.full_like(rewards, float(self.baseline))

    def single_advantages(self, batch: Episodes, rewards: th.Tensor) -> th.Tensor:
        """A = r - b for single-sample methods."""
        return rewards - self.baseline_values(batch, rewards)

    # ------------------------------------------------------------------------------- logging
    def log_rollout(self, batch: Batch) -> None:
        """The paper's metric on the training batch before the update (spec 3.4), and episode stats."""
        if isinstance(batch, Population):
            expected_reward = (batch.old_log_probs.exp() * batch.rewards).sum(-1)
            self.logger.record("rollout/task_error", float(1 - expected_reward.mean()))
            return
        token_rewards = batch.token_rewards
        self.logger.record("rollout/task_error", float(1 - token_rewards.mean()))
        self.logger.record("rollout/ep_rew_mean", float(batch.returns.mean()))
        self.logger.record("rollout/success_rate", float((token_rewards.min(-1).values > 0).float().mean()))
        self.logger.record("rollout/ep_len_mean", float(token_rewards.shape[-1]))
        self._episode_num += len(batch.returns)
        self._write_monitor(batch)

    def _write_monitor(self, batch: Episodes | TokenGroups) -> None:
        """One ``monitor.csv`` row per episode when the env given to the algorithm was a ``VecMonitor``.

        The algorithm collects from its own batched env, so it writes the rows the monitor would have:
        ``r, l, t`` plus the monitor's info keywords ``is_success`` and ``token_error``.
        """
        writer = getattr(getattr(self, "_monitor", None), "results_writer", None)
        if writer is None:
            return
        token_rewards = batch.token_rewards.cpu().numpy()
        extra = {"is_success": token_rewards.min(-1) > 0, "token_error": 1 - token_rewards.mean(-1)}
        elapsed = round(time.time() - self._monitor.t_start, 6)
        rows = [
            {
                "r": round(float(r), 6),
                "l": token_rewards.shape[-1],
                "t": elapsed,
                **{key: extra[key][i] if key in extra else "" for key in self._monitor.info_keywords},
            }
            for i, r in enumerate(batch.returns.cpu().numpy())
        ]
        writer.logger.writerows(rows)
        writer.file_handler.flush()

    def _dump_logs(self, iteration: int) -> None:
        elapsed = max((time.time_ns() - self.start_time) / 1e9, sys.float_info.epsilon)
        fps = int((self.num_timesteps - self._num_timesteps_at_start) / elapsed)
        self.logger.record("time/iterations", iteration, exclude="tensorboard")
        self.logger.record("time/fps", fps)
        self.logger.record("time/time_elapsed", int(elapsed), exclude="tensorboard")
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        if self.ep_info_buffer:
            self.logger.record("rollout/ep_rew_mean", safe_mean([ep["r"] for ep in self.ep_info_buffer]))
        self.logger.dump(step=self.num_timesteps)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "lr_schedule", "_monitor"]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", "policy.optimizer"], []


class _ScaledSchedule:
    """A picklable learning-rate schedule ``scale * base(progress)``."""

    def __init__(self, base: Any, scale: float) -> None:
        self.base, self.scale = base, scale

    def __call__(self, progress_remaining: float) -> float:
        return self.scale * self.base(progress_remaining)


def _find_monitor(env: Any) -> VecMonitor | None:
    """The ``VecMonitor`` in a chain of VecEnv wrappers, if any."""
    while isinstance(env, VecEnvWrapper):
        if isinstance(env, VecMonitor):
            return env
        env = env.venv
    return None


def _global_grad_norm(parameters: Any) -> float:
    grads = [p.grad.detach().flatten() for p in parameters if p.grad is not None]
    return float(th.cat(grads).norm()) if grads else 0.0


def sequence_success(scores: th.Tensor) -> th.Tensor:
    """1 where a candidate's score is positive (a successful candidate), for the all-fail fraction."""
    return scores > 0


def group_diagnostics(scores: th.Tensor) -> dict[str, th.Tensor]:
    """Fractions of all-fail and zero-variance groups of a grouped batch (spec 5)."""
    all_fail = ~sequence_success(scores).any(-1)
    return {
        "all_fail_frac": all_fail.float().mean(),
        "zero_variance_frac": losses.zero_variance_groups(scores).float().mean(),
    }


def mean_kl(old_log_probs: th.Tensor, log_probs: th.Tensor) -> th.Tensor:
    """KL(pi_old || pi_theta) over the action set, averaged over states; logged as ``train/approx_kl``.

    Measured at the start of the last epoch (as SB3 does), so it is 0 for one-epoch methods.
    """
    return (old_log_probs.exp() * (old_log_probs - log_probs)).sum(-1).mean()
