"""Single mode: one sampled episode per context, as SB3's on-policy algorithms collect (MNIST, bandits,
the single-sample methods on the token tasks)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch as th
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from tpo_agents import losses
from tpo_agents.modes.base import EnvTraits, GroupView, SampleView, StepHook
from tpo_agents.modes.episodes import EpisodeMode, Episodes, collect_episodes
from tpo_agents.policies.protocols import ActionPolicy


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
    old_log_probs: th.Tensor  # [S, A] log pi_old of each member's one context, written at collection
    prompts: None = None

    def log_probs(self, policy: Any) -> th.Tensor:
        """log pi_theta of each member's one context ``[S, A]`` (its table row), with gradient."""
        return policy.all_log_probs().reshape(len(self.actions), -1)

    def per_sample(self, log_probs: th.Tensor) -> th.Tensor:
        """Member rows ``[S, A]`` repeated for each sample as ``Episodes`` holds them: ``[S*B, 1, A]``."""
        n_seeds, per_member = self.actions.shape
        return log_probs.unsqueeze(1).expand(n_seeds, per_member, -1).reshape(-1, 1, log_probs.shape[-1])

    def taken(self, log_probs: th.Tensor) -> th.Tensor:
        """log pi of each sample's arm ``[S*B, 1]`` from member rows ``[S, A]``."""
        return log_probs.gather(1, self.actions).reshape(-1, 1)

    def taken_actions(self) -> th.Tensor:
        """The sampled arms as ``Episodes.actions`` holds them: ``[S*B, 1]``."""
        return self.actions.reshape(-1, 1)

    one_row_per_member: ClassVar[bool] = True

    def member_mean_scores(self, advantages: th.Tensor, n_actions: int) -> th.Tensor:
        """The group scores of each member's one context ``[S, A]``: S[a] = (1/B) sum_b A_b [a_b = a], the
        context mean of the samples' one-hot scores."""
        n_seeds, per_member = self.actions.shape
        total = advantages.new_zeros(n_seeds, n_actions).scatter_add_(
            1, self.actions, advantages.detach().reshape(n_seeds, per_member))
        return total / per_member


class SingleMode(EpisodeMode):
    """B contexts (B*K with ``match="interactions"``, and the learning rate times sqrt(K)), one episode each.

    Sample view: the taken actions' log-probs and per-token rewards ``[N, T]``, A = r - b with the
    algorithm's baseline (:func:`tpo_agents.losses.baseline_advantages`).
    Group view (TPO): each sample scores its action set, s = A * onehot(a) with A the episode's
    reward minus the baseline; on a tabular env (a ``Discrete`` context index) the samples of one
    context form one group whose scores are their mean (paper Sec. 3.1); elsewhere (MNIST) every
    sample is its own group, even if two samples drew the same image (paper Sec. 3.3).

    A :class:`TableSamples` batch (a one-context table's samples, from the fast
    collector) has the same views, gathered from each member's one row ``[S, A]`` instead of its
    ``[S*B, A]`` copies: the sampled log-probs ``log pi(a_b)``, and the group's scores
    ``S[a] = (1/B) sum_b A_b [a_b = a]`` summed into the row (the context mean of the one-hot scores).
    """

    name = "single"
    views = ("sample", "group")

    @classmethod
    def is_natural_for(cls, traits: EnvTraits) -> bool:
        """Any env: one sampled episode per context is SB3's way (the bandits, MNIST, and the
        single-sample methods on the token tasks)."""
        return True

    @classmethod
    def uses_group_size(cls, match: str) -> bool:
        """K only scales interaction matching (B*K contexts, lr x sqrt(K)); with ``prompts`` it is unused."""
        return match == "interactions"

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

    def _advantages(self, batch: Episodes | TableSamples, rewards: th.Tensor) -> th.Tensor:
        if self.baseline == "batch_mean":  # a statistic of each member's batch
            return self.per_member(lambda r: losses.baseline_advantages(r, self.baseline), rewards)
        if self.baseline != "expected":  # a constant: each row alone, every member at once
            return losses.baseline_advantages(rewards, self.baseline)
        first_step = batch.per_sample(batch.old_log_probs)[:, 0]  # the expected baseline of each row's own
        return losses.baseline_advantages(rewards, self.baseline, first_step)

    def sample_view(self, batch: Episodes | TableSamples, log_probs: th.Tensor) -> SampleView:
        return SampleView(
            logp=batch.taken(log_probs),
            old_logp=batch.taken(batch.old_log_probs),
            rewards=batch.token_rewards,
            advantages=self._advantages(batch, batch.token_rewards),
            actions=batch.taken_actions(),
            sequence_advantages=self._advantages(batch, batch.token_rewards.sum(-1)),
            n_actions=log_probs.shape[-1],
        )

    def _member_contexts(self, contexts: th.Tensor) -> th.Tensor:
        """Context ids made distinct between members (member m's context c is ``m * C + c``), so that a
        group never mixes members; the members must see equally many contexts (the mean over groups
        then weighs every member alike)."""
        if self.n_seeds == 1:
            return contexts
        per_member = self.member_rows(contexts)
        n_contexts = int(self.observation_space.n)
        keyed = per_member + n_contexts * th.arange(self.n_seeds, device=contexts.device).unsqueeze(1)
        ordered = per_member.sort(dim=1).values  # distinct contexts per member: 1 + changes when sorted
        counts = set((1 + (ordered[:, 1:] != ordered[:, :-1]).sum(1)).tolist())
        if len(counts) > 1:
            raise ValueError(f"the members' batches cover different numbers of contexts ({sorted(counts)}): "
                             "train seeds of a multi-context table in exact mode, or one at a time")
        return keyed.flatten()

    def group_view(self, batch: Episodes | TableSamples, log_probs: th.Tensor) -> GroupView:
        n_actions = log_probs.shape[-1]
        advantages = self._advantages(batch, batch.token_rewards.sum(-1))
        if batch.one_row_per_member:  # one group per member: its row, its samples' mean scores
            return GroupView(log_probs, batch.old_log_probs, batch.member_mean_scores(advantages, n_actions))
        scores = losses.onehot_scores(batch.actions[:, 0], advantages, n_actions)
        logscores, old_logscores = log_probs[:, 0], batch.old_log_probs[:, 0]
        if self.tabular:
            scores, first = losses.context_mean_scores(scores, self._member_contexts(batch.contexts))
            logscores, old_logscores = logscores[first], old_logscores[first]
        return GroupView(logscores, old_logscores, scores)

    def has_signal(self, batch: Episodes | TableSamples, view: str) -> bool:
        """Some advantage is not 0: with the batch-mean baseline, rewards that differ at some position
        (the other baselines always leave a nonzero advantage)."""
        if self.baseline != "batch_mean":
            return True
        return bool(self._advantages(batch, batch.token_rewards).ne(0).any())

    def approx_kl(self, batch: Episodes | TableSamples, log_probs: th.Tensor) -> th.Tensor:
        """KL(pi_old || pi_theta) averaged over every sample's states (a table's member rows repeated)."""
        return losses.policy_kl(batch.per_sample(batch.old_log_probs), batch.per_sample(log_probs))
