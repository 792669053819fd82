"""Token mode (dense reward): K next-token candidates at every prefix, scored by the env without stepping."""

from __future__ import annotations

from gymnasium.vector import VectorEnv

from tpo_agents import losses
from tpo_agents.batches import TokenGroups
from tpo_agents.modes.base import EnvTraits, GroupView, StepHook
from tpo_agents.modes.episodes import EpisodeMode
from tpo_agents.policies.protocols import ActionPolicy
from tpo_agents.rollout import collect_token_groups


class TokenMode(EpisodeMode):
    """B behaviour trajectories; at each state x_t, K candidates a_{t,i} ~ pi_old(.|x_t) with the
    env's rewards r_{t,i}; the trajectory continues with the first candidate (paper Sec. 3.4).

    Group view: L[b,t,i] = log pi(a_{t,i} | x_t), s[b,t,i] = r_{t,i}, groups ``[B, H, K]``.
    """

    name = "token"
    views = ("group",)
    needs = "a per-step reward (reward='bag_of_tokens' or 'sequential', not 'terminal')"

    @classmethod
    def can_collect(cls, traits: EnvTraits) -> bool:
        """Candidates are scored at every prefix: the reward must be dense (not ``terminal``)."""
        return traits.dense_reward

    @classmethod
    def is_natural_for(cls, traits: EnvTraits) -> bool:
        """The dense-reward token tasks: episodes of several steps, each step scored."""
        return traits.dense_reward and traits.horizon > 1

    @classmethod
    def min_group_size(cls, view: str) -> int:
        return 2

    @property
    def n_envs(self) -> int:
        return self.batch_size

    def collect(self, env: VectorEnv, policy: ActionPolicy, on_step: StepHook) -> TokenGroups | None:
        return collect_token_groups(env, policy, self.group_size, on_step)

    def has_signal(self, batch: TokenGroups, view: str) -> bool:
        return not bool(losses.zero_variance_groups(batch.scores).all())

    def group_view(self, batch: TokenGroups, log_probs) -> GroupView:
        return GroupView(
            log_probs.gather(-1, batch.candidates),
            batch.old_log_probs.gather(-1, batch.candidates),
            batch.scores,
        )
