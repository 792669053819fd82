"""Single mode: one sampled episode per context, as SB3's on-policy algorithms collect (MNIST, bandits,
the single-sample methods on the token tasks)."""

from __future__ import annotations

import math

import torch as th
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from agents import losses
from agents.modes.base import GroupView, SampleView, StepHook
from agents.modes.episodes import EpisodeMode
from agents.policies.protocols import ActionPolicy
from agents.rollout import Episodes, collect_episodes


class SingleMode(EpisodeMode):
    """B contexts (B*K with ``match="interactions"``, and the learning rate times sqrt(K)), one episode each.

    Sample view: the taken actions' log-probs and per-token rewards ``[N, T]``, A = r - b with the
    algorithm's baseline (:func:`agents.losses.baseline_advantages`).
    Group view (TPO): each sample scores its action set, s = A * onehot(a) with A the episode's
    reward minus the baseline; on a tabular env (a ``Discrete`` context index) the samples of one
    context form one group whose scores are their mean (paper Sec. 3.1); elsewhere (MNIST) every
    sample is its own group, even if two samples drew the same image (paper Sec. 3.3).
    """

    name = "single"
    views = ("sample", "group")

    @property
    def interaction_matched(self) -> bool:
        return self.match == "interactions"

    @property
    def n_envs(self) -> int:
        return self.batch_size * (self.group_size if self.interaction_matched else 1)

    @property
    def lr_scale(self) -> float:
        return math.sqrt(self.group_size) if self.interaction_matched else 1.0

    @property
    def tabular(self) -> bool:
        return isinstance(self.observation_space, spaces.Discrete)

    def collect(self, env: VectorEnv, policy: ActionPolicy, on_step: StepHook) -> Episodes | None:
        return collect_episodes(env, policy, 1, on_step)

    def _advantages(self, batch: Episodes, rewards: th.Tensor) -> th.Tensor:
        return losses.baseline_advantages(rewards, self.baseline, batch.old_log_probs[:, 0])

    def sample_view(self, batch: Episodes, log_probs: th.Tensor) -> SampleView:
        actions = batch.actions.unsqueeze(-1)
        return SampleView(
            logp=log_probs.gather(-1, actions).squeeze(-1),
            old_logp=batch.old_log_probs.gather(-1, actions).squeeze(-1),
            rewards=batch.token_rewards,
            advantages=self._advantages(batch, batch.token_rewards),
            actions=batch.actions,
            sequence_advantages=self._advantages(batch, batch.token_rewards.sum(-1)),
            n_actions=log_probs.shape[-1],
        )

    def group_view(self, batch: Episodes, log_probs: th.Tensor) -> GroupView:
        n_actions = log_probs.shape[-1]
        advantages = self._advantages(batch, batch.token_rewards.sum(-1))
        scores = losses.onehot_scores(batch.actions[:, 0], advantages, n_actions)
        logscores, old_logscores = log_probs[:, 0], batch.old_log_probs[:, 0]
        if self.tabular:
            scores, first = losses.context_mean_scores(scores, batch.contexts)
            logscores, old_logscores = logscores[first], old_logscores[first]
        return GroupView(logscores, old_logscores, scores)
